"""TensorRT `model.plan` engines via the TensorRT 10 Python API, CUDA buffers from torch.

The plan comes from the snapshot image when the image carries one built for this GPU and this
TensorRT (`snapshotter.tensorrt_plan_from_image`: keyed by compute capability, TensorRT version
and model digest), else from `model.plan`; either way `IRuntime.deserialize_cuda_engine` loads
it, and nothing is ever built at a cold start.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from runtime.backends.base import ExecTimings, LoadContext
from runtime.backends.batch_tensors import BatchLayout, run_batched
from runtime.backends.tensorrt_dtypes import IoType, from_wire, io_type, to_wire
from runtime.devices.errors import device_failure
from runtime.errors import RepositoryError, ServingError
from runtime.inference import InferRequest, InferResponse, InferTensor

__all__ = ["TensorRTBackend"]

logger = logging.getLogger(__name__)


def _import_tensorrt(model: str) -> Any:
    try:
        import tensorrt
    except ImportError as exc:
        raise RepositoryError(
            f"model '{model}' is a TensorRT plan but the `tensorrt` package is not installed "
            "(install the gpu extra: pip install 'thaw-serve[gpu]')"
        ) from exc
    return tensorrt


class TensorRTBackend:
    """One TensorRT execution context on one GPU, with its own CUDA stream."""

    gil_bound = False  # TensorRT releases the GIL while it runs
    execute_async = None  # computes in this process: a worker thread runs `execute`

    def __init__(self) -> None:
        self.timings = ExecTimings()
        self.used_image = False  # True when the engine came from a snapshot image
        self._engine: Any = None
        self._context: Any = None
        self._stream: Any = None
        self._device = "cuda:0"
        self._name = ""
        self._version = ""
        self._inputs: list[str] = []
        self._outputs: list[str] = []
        self._types: dict[str, IoType] = {}
        self._layout: BatchLayout | None = None  # how a dynamic batch runs as one execution

    def load(self, ctx: LoadContext) -> None:
        trt = _import_tensorrt(ctx.model_name)
        import torch

        if not torch.cuda.is_available():
            raise RepositoryError(f"model '{ctx.model_name}' is a TensorRT plan and needs CUDA")
        if ctx.instance_kind != "KIND_GPU":
            raise RepositoryError(f"model '{ctx.model_name}': TensorRT plans need KIND_GPU")
        self._name, self._version = ctx.model_name, ctx.version
        self._layout = BatchLayout.from_config(ctx.config)
        self._device = f"cuda:{ctx.device_id}"
        torch.cuda.set_device(ctx.device_id)
        plan = _image_plan(ctx)
        self.used_image = plan is not None
        if plan is None:
            plan = (ctx.model_file or ctx.version_dir / "model.plan").read_bytes()
        runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
        self._engine = runtime.deserialize_cuda_engine(plan)
        if self._engine is None:
            raise RepositoryError(
                f"model '{ctx.model_name}': TensorRT cannot deserialize the plan (built for "
                "another TensorRT version or GPU?)"
            )
        self._context = self._engine.create_execution_context()
        self._stream = torch.cuda.Stream(device=self._device)
        for i in range(self._engine.num_io_tensors):
            name = self._engine.get_tensor_name(i)
            try:  # not trt.nptype: it has no numpy type for BF16/FP8 (tensorrt_dtypes.py)
                self._types[name] = io_type(self._engine.get_tensor_dtype(name), name)
            except ValueError as exc:
                raise RepositoryError(f"model '{ctx.model_name}': {exc}") from None
            if self._engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
                self._inputs.append(name)
            else:
                self._outputs.append(name)

    def execute(self, requests: list[InferRequest]) -> list[InferResponse | ServingError]:
        total = ExecTimings()
        layout = self._layout
        if layout is not None and layout.merges(requests):
            # A dynamic batch: one engine execution over the concatenated inputs.
            results = run_batched(layout, requests, lambda merged: self._guarded(merged, total))
        else:
            results = [self._guarded(request, total) for request in requests]
        self.timings = total
        return results

    def _guarded(self, request: InferRequest, total: ExecTimings) -> InferResponse | ServingError:
        try:
            return self._run_one(request, total)
        except Exception as exc:  # CUDA OOM, shape outside the engine's profile, ...
            logger.warning("model=%s TensorRT execute failed: %r", self._name, exc)
            return device_failure(self._name, exc, device=self._device)

    def _run_one(self, request: InferRequest, total: ExecTimings) -> InferResponse:
        import torch

        t0 = time.perf_counter_ns()
        keep: list[Any] = []  # device buffers must live until the stream finishes
        with torch.cuda.stream(self._stream):
            for tensor in request.inputs:
                host = from_wire(torch, tensor.data, self._types[tensor.name])
                device_tensor = host.to(self._device, non_blocking=True)
                keep.append(device_tensor)
                self._context.set_input_shape(tensor.name, tuple(host.shape))
                self._context.set_tensor_address(tensor.name, device_tensor.data_ptr())
            wanted = [o.name for o in request.requested_outputs] or self._outputs
            buffers: dict[str, Any] = {}
            for name in self._outputs:
                shape = tuple(self._context.get_tensor_shape(name))
                dtype = getattr(torch, self._types[name].torch)
                buffers[name] = torch.empty(shape, dtype=dtype, device=self._device)
                self._context.set_tensor_address(name, buffers[name].data_ptr())
            t1 = time.perf_counter_ns()
            if not self._context.execute_async_v3(self._stream.cuda_stream):
                raise ServingError(f"model '{self._name}': TensorRT execution failed")
            self._stream.synchronize()
            t2 = time.perf_counter_ns()
        outputs = []
        for name in wanted:
            array = to_wire(torch, buffers[name], self._types[name])
            outputs.append(InferTensor(name, self._types[name].v2, tuple(array.shape), array))
        t3 = time.perf_counter_ns()
        total.add(t0, t1, t2, t3)
        return InferResponse(self._name, self._version, outputs, id=request.id)

    def unload(self) -> None:
        self._context = None
        self._engine = None
        self._stream = None


def _image_plan(ctx: LoadContext) -> bytes | None:
    """The image's plan when it was built for this GPU and TensorRT, else None (logged why)."""
    if ctx.image is None:
        return None
    from snapshotter import tensorrt_plan_from_image

    return tensorrt_plan_from_image(ctx.image, device_id=ctx.device_id)
