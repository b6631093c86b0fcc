"""ONNX models on onnxruntime (CPU, or CUDA/TensorRT providers), optionally from a snapshot."""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from runtime.backends.base import ExecTimings, LoadContext, SnapshotImage
from runtime.backends.batch_tensors import BatchLayout, run_batched
from runtime.backends.ort_initializers import initializer_values
from runtime.backends.ort_providers import check_providers, wanted_providers
from runtime.datatypes import numpy_to_v2
from runtime.devices.errors import device_failure
from runtime.errors import RepositoryError, ServingError
from runtime.inference import InferRequest, InferResponse, InferTensor
from runtime.model_config import ort_settings
from tritonconfig import io_mismatch, is_scalar_dims
from tritonconfig.ort_session_options import ARENA_SHRINKAGE, OrtSettings

__all__ = ["OnnxRuntimeBackend"]

logger = logging.getLogger(__name__)


class OnnxRuntimeBackend:
    """One onnxruntime InferenceSession."""

    gil_bound = False  # onnxruntime releases the GIL while it runs
    execute_async = None  # computes in this process: a worker thread runs `execute`

    def __init__(self) -> None:
        self.timings = ExecTimings()
        self._session: Any = None
        self._name = ""
        self._version = ""
        self._outputs: list[str] = []
        self._device = "cpu"
        self._string_inputs: set[str] = set()
        # The model's scalar (0-dimensional) tensors a config gives one-element dims: the
        # inputs fed as scalars, the outputs answered in the config's dims (Triton's scalar I/O).
        self._scalar_inputs: set[str] = set()
        self._scalar_outputs: dict[str, tuple[int, ...]] = {}
        self._layout: BatchLayout | None = None  # how a dynamic batch runs as one session run
        self.used_image = False  # True when the weights came from a snapshot image
        self._keepalive: list[Any] = []  # OrtValues over snapshot memory must outlive the session
        self.providers: list[str] = []  # the session's, after load (the planned one first)
        self._run_options: Any = None  # a config's run options (ort_session_options)

    def load(self, ctx: LoadContext) -> None:
        import onnxruntime as ort

        self._name, self._version = ctx.model_name, ctx.version
        self._layout = BatchLayout.from_config(ctx.config)
        options = ort.SessionOptions()
        settings = ort_settings(ctx.config, ctx.instance_count)
        settings.apply(options, ort)
        _log_settings(ctx.model_name, ctx.config, settings)
        self._run_options = settings.run_options(ort)
        providers = wanted_providers(ctx, ort.get_available_providers())
        self._device = f"cuda:{ctx.device_id}" if ctx.instance_kind == "KIND_GPU" else "cpu"
        source: Any = str(ctx.model_file or ctx.version_dir / "model.onnx")
        image = ctx.image
        graph, optimized = (
            _image_graph(ctx, image, providers, settings) if image is not None else (None, False)
        )
        context = _context_model(providers)
        if optimized or context is not None:
            # onnxruntime's own optimized graph, or an EP-context model whose engine is built:
            # running graph passes again is waste (and onnxruntime warns for EP contexts).
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        if context is not None:  # TensorRT deserializes the image's engine: no builder, no weights
            logger.info("model=%s TensorRT EP-context model from the image", ctx.model_name)
            source = str(context)
            self.used_image = True
        elif image is not None and graph is not None:
            names, self._keepalive = initializer_values(ort, image)
            options.add_external_initializers(names, self._keepalive)
            source = graph
            self.used_image = True
        try:
            self._session = ort.InferenceSession(source, options, providers=providers)
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph/... types
            raise RepositoryError(
                f"model '{ctx.model_name}': onnxruntime cannot load: {exc}"
            ) from exc
        # An EP error at `run` must fail that request, not move the session to the CPU for
        # good; and a session that came up on other providers than planned says so.
        self._session.disable_fallback()
        self.providers = list(self._session.get_providers())
        check = check_providers(ctx.model_name, providers, self.providers)
        if check.fallback is not None:
            ctx.fallback(check.fallback, check.message)
        mismatch = io_mismatch(
            ctx.config,
            _ios(self._session.get_inputs()),
            _ios(self._session.get_outputs()),
            _ios(self._session.get_overridable_initializers()),
        )
        if mismatch:
            raise RepositoryError(mismatch)
        self._outputs = [o.name for o in self._session.get_outputs()]
        self._string_inputs = {
            i.name for i in self._session.get_inputs() if i.type == "tensor(string)"
        }
        self._scalar_inputs, self._scalar_outputs = _scalars(
            ctx.config, self._session.get_inputs(), self._session.get_outputs()
        )

    def execute(self, requests: list[InferRequest]) -> list[InferResponse | ServingError]:
        total = ExecTimings()
        layout = self._layout
        if layout is not None and layout.merges(requests):
            # A dynamic batch: one session run over the concatenated inputs.
            results = run_batched(layout, requests, lambda merged: self._run_one(merged, total))
        else:
            results = [self._run_one(request, total) for request in requests]
        self.timings = total
        return results

    def _run_one(self, request: InferRequest, total: ExecTimings) -> InferResponse | ServingError:
        t0 = time.perf_counter_ns()
        feed = {}
        for tensor in request.inputs:
            data = tensor.data
            if tensor.name in self._string_inputs:
                data = np.vectorize(_to_str, otypes=[object])(data) if data.size else data
            if tensor.name in self._scalar_inputs:
                data = data.reshape(())
            feed[tensor.name] = data
        names = [o.name for o in request.requested_outputs] or self._outputs
        t1 = time.perf_counter_ns()
        try:
            if self._run_options is None:
                arrays = self._session.run(names, feed)
            else:
                arrays = self._session.run(names, feed, self._run_options)
        except Exception as exc:  # includes MemoryError and onnxruntime's RuntimeException
            total.compute_infer_ns += time.perf_counter_ns() - t1
            logger.warning("model=%s onnxruntime run failed: %r", self._name, exc)
            return device_failure(self._name, exc, device=self._device)
        t2 = time.perf_counter_ns()
        outputs = [
            _tensor(name, self._in_config_dims(name, array))
            for name, array in zip(names, arrays, strict=True)
        ]
        t3 = time.perf_counter_ns()
        total.add(t0, t1, t2, t3)
        return InferResponse(self._name, self._version, outputs, id=request.id)

    def _in_config_dims(self, name: str, array: Any) -> Any:
        dims = self._scalar_outputs.get(name)
        if dims is None or np.ndim(array) != 0:
            return array
        return np.asarray(array).reshape(dims)

    def unload(self) -> None:
        self._session = None
        self._keepalive = []


def _scalars(
    config: Any, inputs: list[Any], outputs: list[Any]
) -> tuple[set[str], dict[str, tuple[int, ...]]]:
    """The model's scalar inputs and outputs (0-dimensional, or of unknown rank) whose config
    dims are one element (io_mismatch lets them load): inputs by name, outputs with their
    config dims."""
    if config.max_batch_size > 0:
        return set(), {}
    model_inputs = {arg.name for arg in inputs if not arg.shape}
    model_outputs = {arg.name for arg in outputs if not arg.shape}
    scalar_inputs = {
        io.name for io in config.input if io.name in model_inputs and is_scalar_dims(io.dims)
    }
    scalar_outputs = {
        io.name: tuple(io.dims)
        for io in config.output
        if io.name in model_outputs and is_scalar_dims(io.dims)
    }
    return scalar_inputs, scalar_outputs


def _context_model(providers: list[Any]) -> Any:
    """The image's TensorRT EP-context model the TensorRT options point at, or None."""
    for provider in providers:
        if isinstance(provider, tuple) and provider[0] == "TensorrtExecutionProvider":
            from snapshotter import trt_context_model

            return trt_context_model(provider[1])
    return None


def _image_graph(
    ctx: LoadContext, image: SnapshotImage, providers: list[Any], settings: OrtSettings
) -> tuple[bytes | None, bool]:
    """The image's weightless graph (None: load the model file) and whether it is optimized.

    A graph that onnxruntime already optimized at build time is used, with optimizations off,
    only on the CPU provider of a host with the same onnxruntime and CPU features (the image
    decides), and only for a model that asks for all of them (a config's lower
    `optimization.graph.level` is kept); its tensors are the optimized ones, so elsewhere the
    image is not usable.
    """
    graph, optimized = image.onnx_graph()
    if optimized and (providers != ["CPUExecutionProvider"] or not settings.all_optimizations):
        graph, optimized = None, False
    if graph is None:
        logger.info(
            "model=%s image has no onnxruntime graph for this host and provider (built for "
            "%s); loading the model file",
            ctx.model_name, image.manifest.framework_versions,
        )  # fmt: skip
    return graph, optimized


def _log_settings(model: str, config: Any, settings: OrtSettings) -> None:
    """Triton's verbose lines for the memory settings a config gives."""
    for key in ("enable_mem_arena", "enable_mem_pattern", ARENA_SHRINKAGE):
        if key in config.parameters:
            logger.debug("model=%s Configuring %s to %s", model, key,
                         config.parameters[key].string_value)  # fmt: skip
    if not settings.all_optimizations or settings.parallel:
        mode = "parallel" if settings.parallel else "sequential"
        logger.info("model=%s onnxruntime session: %s, %s execution", model,
                    settings.graph_level, mode)  # fmt: skip


def _ios(args: list[Any]) -> list[tuple[str, list[int]]]:
    """onnxruntime's NodeArgs as (name, shape), a symbolic or unknown dimension as -1."""
    return [(arg.name, [d if isinstance(d, int) else -1 for d in arg.shape or []]) for arg in args]


def _to_str(item: Any) -> str:
    return item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)


def _tensor(name: str, array: Any) -> InferTensor:
    if not isinstance(array, np.ndarray):
        array = np.asarray(array)
    if array.dtype == np.object_:
        array = (
            np.vectorize(lambda s: s.encode() if isinstance(s, str) else s, otypes=[object])(array)
            if array.size
            else array
        )
    return InferTensor(name, numpy_to_v2(array.dtype), tuple(array.shape), array)
