"""PyTorch models: TorchScript `model.pt` and `torch.export` `model.pt2`, or a snapshot."""

from __future__ import annotations

import io
import logging
import threading
import time
import warnings
from typing import Any

import numpy as np

from runtime.backends.base import ExecTimings, LoadContext
from runtime.backends.batch_tensors import BatchLayout, run_batched
from runtime.datatypes import numpy_to_v2
from runtime.errors import RepositoryError, ServingError
from runtime.inference import InferRequest, InferResponse, InferTensor
from snapshotter import arg_positions
from tritonconfig import (
    TORCH_COMPILE_PARAMETER,
    CompileSettings,
    ModelConfigError,
    compile_settings,
)

__all__ = ["TorchBackend", "positions"]

logger = logging.getLogger(__name__)

# Read-only request buffers are never written by inference; torch warns about them anyway.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
# torch.export.load keeps its deserializer in a module global ("_CURRENT_DESERIALIZER is already
# set" when two models load at once in one process): one load at a time.
_EXPORT_LOAD_LOCK = threading.Lock()


def _export_load(torch: Any, source: Any) -> Any:
    with _EXPORT_LOAD_LOCK:
        return torch.export.load(source)


# Triton's PyTorch naming rule: `<prefix>__<i>`, else the forward arguments' names, else config
# order (one implementation: image builds warm compiled models up with the same positions).
positions = arg_positions


class TorchBackend:
    """One TorchScript module or exported program, on CPU or one CUDA device."""

    gil_bound = False  # torch releases the GIL in its kernels
    execute_async = None  # computes in this process: a worker thread runs `execute`

    def __init__(self) -> None:
        self.timings = ExecTimings()
        self._module: Any = None
        self._name = ""
        self._version = ""
        self._device = "cpu"
        self._inputs: dict[str, int] = {}
        self._outputs: dict[str, int] = {}
        self._layout: BatchLayout | None = None  # how a dynamic batch runs as one forward
        self.used_image = False  # True when the weights came from a snapshot image

    def load(self, ctx: LoadContext) -> None:
        import torch

        self._name, self._version = ctx.model_name, ctx.version
        self._layout = BatchLayout.from_config(ctx.config)
        self._device = f"cuda:{ctx.device_id}" if ctx.instance_kind == "KIND_GPU" else "cpu"
        if self._device != "cpu" and not torch.cuda.is_available():
            raise RepositoryError(
                f"model '{ctx.model_name}' asks for KIND_GPU but CUDA is unavailable"
            )
        settings = _compile_settings(ctx)
        path = ctx.model_file or ctx.version_dir / "model.pt"
        if path.suffix == ".pt2":
            program = self._load_program(ctx, torch, path)
            self._module = program.module()
            forward_args = [str(name) for name in program.graph_signature.user_inputs]
        else:
            if settings is not None:
                raise RepositoryError(
                    f"model '{ctx.model_name}': parameter `{TORCH_COMPILE_PARAMETER}` "
                    "applies to torch.export programs (model.pt2); torch.compile cannot compile "
                    "a TorchScript module"
                )
            self._module = self._load_script(ctx, torch)
            self._module.eval()
            forward_args = [a.name for a in self._module.forward.schema.arguments][1:]
        if self._device != "cpu":
            self._module.to(self._device)
        # Batch inputs (ragged batching) are inputs too, after the declared ones, as in Triton.
        batch_inputs = [t for b in ctx.config.batch_input for t in b.target_name]
        self._inputs = positions([i.name for i in ctx.config.input] + batch_inputs, forward_args)
        self._outputs = positions([o.name for o in ctx.config.output], [])
        if settings is not None:
            self._module = self._compile(ctx, settings)

    def _compile(self, ctx: LoadContext, settings: Any) -> Any:
        """torch.compile + warm-up, from the image's compile caches when they fit this host."""
        from snapshotter import compile_for_serving, warmup_inputs

        start = time.perf_counter()
        inputs = warmup_inputs(ctx.config)
        if inputs is None:
            logger.info("model=%s an input has no sample form: compiling at the first request",
                        ctx.model_name)  # fmt: skip
        try:
            compiled = compile_for_serving(
                self._module, settings, inputs, self._inputs, device=self._device, image=ctx.image
            )
        except Exception as exc:  # dynamo/inductor raise many types (BackendCompilerFailed...)
            raise RepositoryError(f"model '{ctx.model_name}': torch.compile failed: {exc}") from exc
        logger.info("model=%s compiled (%s) and warmed up in %.2f s", ctx.model_name,
                    settings.kwargs(), time.perf_counter() - start)  # fmt: skip
        return compiled

    def _load_program(self, ctx: LoadContext, torch: Any, path: Any) -> Any:
        """A torch.export program: from the file, or weightless with the arena's state dict."""
        image = ctx.image
        weightless = image.artifact("export_weightless") if image is not None else None
        if image is None or weightless is None:
            return _export_load(torch, str(path))
        program = _export_load(torch, io.BytesIO(weightless))
        views = image.torch_tensors()
        for name, old in list(program.state_dict.items()):
            if name not in views:
                raise RepositoryError(
                    f"model '{ctx.model_name}': snapshot image has no tensor '{name}'"
                )
            view = views[name]
            if isinstance(old, torch.nn.Parameter):
                view = torch.nn.Parameter(view, requires_grad=False)
            program.state_dict[name] = view
        self.used_image = True
        return program

    def _load_script(self, ctx: LoadContext, torch: Any) -> Any:
        image = ctx.image
        weightless = image.artifact("torchscript_weightless") if image is not None else None
        if image is None or weightless is None:
            path = ctx.model_file or ctx.version_dir / "model.pt"
            return torch.jit.load(str(path), map_location=self._device)
        start = time.perf_counter()
        module = torch.jit.load(io.BytesIO(weightless), map_location="cpu")
        self.used_image = True
        views = image.torch_tensors()
        # Zero copy: each parameter / buffer becomes the (contiguous, 4 KiB-aligned) arena
        # view itself. Measured on the 1 GiB benchmark model: ~0.017 s for archive + views, and
        # a first forward as fast as a file-loaded module's (what follows the restore is the
        # model's own compute, not this step).
        with torch.no_grad():
            for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
                if name not in views:
                    raise RepositoryError(
                        f"model '{ctx.model_name}': snapshot image has no tensor '{name}'"
                    )
                tensor.set_(views[name])
        logger.debug(
            "model=%s weightless TorchScript + %d arena views in %.4f s",
            ctx.model_name,
            len(views),
            time.perf_counter() - start,
        )
        return module

    def execute(self, requests: list[InferRequest]) -> list[InferResponse | ServingError]:
        import torch

        total = ExecTimings()
        layout = self._layout
        with torch.inference_mode():
            if layout is not None and layout.merges(requests):
                # A dynamic batch: one forward over the concatenated inputs.
                results = run_batched(
                    layout, requests, lambda merged: self._run_one(torch, merged, total)
                )
            else:
                results = [self._run_one(torch, request, total) for request in requests]
        self.timings = total
        return results

    def _run_one(
        self, torch: Any, request: InferRequest, total: ExecTimings
    ) -> InferResponse | ServingError:
        t0 = time.perf_counter_ns()
        args: list[Any] = [None] * len(self._inputs)
        try:
            for tensor in request.inputs:
                args[self._inputs[tensor.name]] = _to_torch(torch, tensor, self._device)
        except (TypeError, ValueError) as exc:
            return ServingError(f"model '{self._name}': cannot pass inputs to torch: {exc}")
        t1 = time.perf_counter_ns()
        try:
            result = self._module(*args)
        except Exception as exc:  # includes MemoryError and TorchScript's RuntimeError
            total.compute_infer_ns += time.perf_counter_ns() - t1
            logger.warning("model=%s forward failed: %r", self._name, exc)
            return ServingError(f"model '{self._name}' failed: {exc}")
        t2 = time.perf_counter_ns()
        try:
            outputs = self._outputs_of(torch, result, request)
        except (IndexError, KeyError, TypeError) as exc:
            return ServingError(f"model '{self._name}' returned unexpected outputs: {exc}")
        t3 = time.perf_counter_ns()
        total.add(t0, t1, t2, t3)
        return InferResponse(self._name, self._version, outputs, id=request.id)

    def _outputs_of(self, torch: Any, result: Any, request: InferRequest) -> list[InferTensor]:
        if isinstance(result, torch.Tensor):
            result = (result,)
        wanted = [o.name for o in request.requested_outputs] or list(self._outputs)
        outputs = []
        for name in wanted:
            value = result[name] if isinstance(result, dict) else result[self._outputs[name]]
            array = _to_numpy(torch, value)
            datatype = "BF16" if value.dtype == torch.bfloat16 else numpy_to_v2(array.dtype)
            outputs.append(InferTensor(name, datatype, tuple(array.shape), array))
        return outputs

    def unload(self) -> None:
        self._module = None


def _compile_settings(ctx: LoadContext) -> CompileSettings | None:
    """The model's `TORCH_COMPILE_OPTIONAL_PARAMETERS` (Triton's name), or None: no compile."""
    try:
        return compile_settings(ctx.config)
    except ModelConfigError as exc:
        raise RepositoryError(f"model '{ctx.model_name}': {exc}") from None


def _to_torch(torch: Any, tensor: InferTensor, device: str) -> Any:
    data = tensor.data
    if data.dtype == np.object_:
        raise TypeError(f"input '{tensor.name}': BYTES tensors are not supported by torch models")
    value = torch.from_numpy(np.ascontiguousarray(data))
    if tensor.datatype == "BF16":
        value = value.view(torch.bfloat16)
    return value.to(device) if device != "cpu" else value


def _to_numpy(torch: Any, value: Any) -> np.ndarray:
    value = value.detach()
    if value.device.type != "cpu":
        value = value.cpu()
    if value.dtype == torch.bfloat16:
        return np.asarray(value.view(torch.int16).numpy().view(np.uint16))
    return np.asarray(value.numpy())
