"""PyTorch models: TorchScript `model.pt` and `torch.export` `model.pt2`, or a snapshot.

BYTES inputs and outputs travel as TorchScript's `List[str]`, as in Triton's libtorch backend
(backends/torch_strings.py).

On a GPU instance whose image was restored into that GPU (runtime.devices.plan), every parameter
and buffer becomes a view of the device arena: no host copy, no `.to()`. CUDA graphs are
captured at load where the config asks (`optimization.cuda.graphs`: backends/cuda_graphs.py).
"""

from __future__ import annotations

import gc
import io
import logging
import threading
import time
import warnings
from typing import Any

import numpy as np

from runtime.backends.base import ExecTimings, LoadContext
from runtime.backends.batch_tensors import BatchLayout, run_batched
from runtime.backends.cuda_graphs import capture_graphs, graph_shapes
from runtime.backends.export_placement import place_program
from runtime.backends.torch_strings import (
    check_string_io,
    string_list,
    string_output,
)
from runtime.datatypes import numpy_to_v2
from runtime.devices.errors import device_failure
from runtime.devices.plan import FallbackReason
from runtime.errors import InvalidInput, RepositoryError, ServingError
from runtime.inference import InferRequest, InferResponse, InferTensor
from runtime.model_config import inference_mode, torch_settings, weight_sharing
from snapshotter import arg_positions
from tritonconfig import (
    TORCH_COMPILE_PARAMETER,
    CompileSettings,
    ModelConfigError,
    compile_settings,
)
from tritonconfig.schema import mc
from tritonconfig.torch_datatypes import unsupported_datatype
from tritonconfig.torch_parameters import TorchSettings

__all__ = ["TorchBackend", "output_positions", "positions", "release_device_cache"]

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
        self._output_types: dict[str, str] = {}  # each config output's datatype (v2 name)
        self._layout: BatchLayout | None = None  # how a dynamic batch runs as one forward
        self._inference_mode = True  # INFERENCE_MODE (tritonconfig.torch_parameters)
        self._settings = TorchSettings()  # the libtorch backend's other execution settings
        self.used_image = False  # True when the weights came from a snapshot image

    def load(self, ctx: LoadContext) -> None:
        import torch

        self._name, self._version = ctx.model_name, ctx.version
        check_string_io(ctx.config)
        self._output_types = {o.name: _config_datatype(o.data_type) for o in ctx.config.output}
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
            if self._device != "cpu":
                program = self._placed(ctx, program)
            self._module = program.module()
            forward_args = [str(name) for name in program.graph_signature.user_inputs]
        else:
            if settings is not None:
                raise RepositoryError(
                    f"model '{ctx.model_name}': parameter `{TORCH_COMPILE_PARAMETER}` "
                    "applies to torch.export programs (model.pt2); torch.compile cannot compile "
                    "a TorchScript module"
                )
            self._module = self._shared_script(ctx, torch)
            self._module.eval()
            forward_args = [a.name for a in self._module.forward.schema.arguments][1:]
        if self._device != "cpu":
            self._module.to(self._device)  # a no-op for weights restored into this device
        # Batch inputs (ragged batching), a sequence model's control inputs and its implicit
        # state are inputs too, after the declared ones, placed by the same rule
        # (`START__1`), as in Triton; a state's output is an output (`OUTPUT_STATE__1`).
        batch_inputs = [t for b in ctx.config.batch_input for t in b.target_name]
        sequence = ctx.config.sequence_batching
        controls = [c.name for c in sequence.control_input]
        states = [s.input_name for s in sequence.state]
        expected = [i.name for i in ctx.config.input] + batch_inputs + controls + states
        if len(expected) != len(forward_args):  # Triton's libtorch backend's check, its words
            raise RepositoryError(
                f"unable to load model '{ctx.model_name}', configuration expects "
                f"{len(expected)} inputs, model provides {len(forward_args)}"
            )
        refused = unsupported_datatype(ctx.config, ctx.model_name)
        if refused is not None:
            raise RepositoryError(refused)
        self._inference_mode = inference_mode(ctx.config)
        self._settings = torch_settings(ctx.config)
        instance = ctx.instance_name or ctx.model_name
        logger.info(
            "model=%s Inference Mode is %s for model instance '%s'", ctx.model_name,
            "enabled" if self._inference_mode else "disabled", instance,
        )  # fmt: skip
        for line in self._settings.log_lines(instance):
            logger.info("model=%s %s", ctx.model_name, line)
        _set_thread_counts(torch, self._settings, ctx.model_name)
        self._inputs = positions(expected, forward_args)
        declared = [o.name for o in ctx.config.output]
        state_outputs = [s.output_name for s in sequence.state if s.output_name not in declared]
        self._outputs = output_positions(declared + state_outputs)
        if settings is not None:
            self._module = self._compile(ctx, settings)
        if self._device != "cpu":
            self._module = self._graphs(ctx, self._module)

    def _placed(self, ctx: LoadContext, program: Any) -> Any:
        """The program with the devices written into its graph moved to this GPU; ops that
        stay elsewhere are a counted fallback (backends/export_placement.py)."""
        program, left = place_program(program, self._device)
        if left:
            ctx.fallback(
                FallbackReason.CPU_PLACED_OPS.value,
                f"the exported program computes {len(left)} op(s) on another device than "
                f"{self._device} ({', '.join(left[:5])}): host-device copies on every request; "
                "export it without fixed devices",
            )
        return program

    def _graphs(self, ctx: LoadContext, module: Any) -> Any:
        """The module behind captured CUDA graphs when the config asks and allows, else itself."""
        shapes, why_not = graph_shapes(ctx.config)
        if why_not is not None:
            logger.info("model=%s no CUDA graphs: %s; running eagerly", ctx.model_name, why_not)
        if not shapes:
            return module
        start = time.perf_counter()
        graphed = capture_graphs(module, shapes, self._inputs, self._device)
        logger.info("model=%s %d CUDA graph(s) captured in %.2f s", ctx.model_name,
                    graphed.captured, time.perf_counter() - start)  # fmt: skip
        if graphed.failures:
            ctx.fallback(
                FallbackReason.CUDA_GRAPH_CAPTURE.value,
                f"CUDA graph capture failed for {len(graphed.failures)} of {len(shapes)} "
                f"shape(s), which run eagerly: {graphed.failures[0]}",
            )
        return graphed if graphed.captured else module

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
        views = self._image_views(ctx)
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

    def _shared_script(self, ctx: LoadContext, torch: Any) -> Any:
        """The TorchScript module, or with ENABLE_WEIGHT_SHARING the one an earlier instance
        of this version loaded on this device (Triton's libtorch backend shares it so)."""
        if not weight_sharing(ctx.config):
            return self._load_script(ctx, torch)
        key = f"torchscript:{self._device}"
        if key in ctx.shared:
            module, self.used_image = ctx.shared[key]
            logger.info("model=%s Reusing TorchScript model for instance '%s'", ctx.model_name,
                        ctx.instance_name)  # fmt: skip
            return module
        module = self._load_script(ctx, torch)
        ctx.shared[key] = (module, self.used_image)
        return module

    def _load_script(self, ctx: LoadContext, torch: Any) -> Any:
        image = ctx.image
        weightless = image.artifact("torchscript_weightless") if image is not None else None
        if image is None or weightless is None:
            path = ctx.model_file or ctx.version_dir / "model.pt"
            return torch.jit.load(str(path), map_location=self._device)
        start = time.perf_counter()
        views = self._image_views(ctx)
        # The weightless archive's empty tensors live where the views do: `set_` cannot move
        # a tensor between devices.
        module = torch.jit.load(io.BytesIO(weightless), map_location=image.device)
        self.used_image = True
        # Zero copy: each parameter / buffer becomes the (contiguous, 4 KiB-aligned) arena
        # view itself — of device memory when the image was restored into this GPU. Measured
        # on the 1 GiB benchmark model (host): ~0.017 s for archive + views, and a first
        # forward as fast as a file-loaded module's.
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

    def _image_views(self, ctx: LoadContext) -> Any:
        """The image's torch views; restored into another device than this instance's, they
        are the host arena's (then `.to()` copies once, as for a file load)."""
        image = ctx.image
        if image is None:
            raise RepositoryError(f"model '{ctx.model_name}': no image to take weights from")
        where = image.device
        if where not in ("cpu", self._device):
            raise RepositoryError(
                f"model '{ctx.model_name}': image restored into {where}, instance runs on "
                f"{self._device}"
            )
        return image.torch_tensors()

    def execute(self, requests: list[InferRequest]) -> list[InferResponse | ServingError]:
        import torch

        total = ExecTimings()
        layout = self._layout
        _apply(torch, self._settings)
        with torch.inference_mode() if self._inference_mode else torch.no_grad():
            if layout is not None and layout.merges(requests):
                # A dynamic batch: one forward over the concatenated inputs.
                results = run_batched(
                    layout, requests, lambda merged: self._run_one(torch, merged, total)
                )
            else:
                results = [self._run_one(torch, request, total) for request in requests]
        if self._settings.cache_cleaning and self._device != "cpu":
            torch.cuda.empty_cache()
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
        except InvalidInput as exc:  # a BYTES element that is not text
            return exc
        except (TypeError, ValueError) as exc:
            return ServingError(f"model '{self._name}': cannot pass inputs to torch: {exc}")
        t1 = time.perf_counter_ns()
        try:
            result = self._module(*args)
        except Exception as exc:  # includes MemoryError, TorchScript's RuntimeError, CUDA OOM
            total.compute_infer_ns += time.perf_counter_ns() - t1
            logger.warning("model=%s forward failed: %r", self._name, exc)
            return device_failure(self._name, exc, device=self._device)
        t2 = time.perf_counter_ns()
        try:
            outputs = self._outputs_of(torch, result, request)
        except _ConfigMismatch as exc:  # Triton's INVALID_ARG, in its words
            return InvalidInput(str(exc))
        except (IndexError, KeyError, TypeError) as exc:
            return ServingError(f"model '{self._name}' returned unexpected outputs: {exc}")
        t3 = time.perf_counter_ns()
        total.add(t0, t1, t2, t3)
        return InferResponse(self._name, self._version, outputs, id=request.id)

    def _outputs_of(self, torch: Any, result: Any, request: InferRequest) -> list[InferTensor]:
        if isinstance(result, torch.Tensor) or _one_list(torch, result):
            result = (result,)
        if not isinstance(result, dict):
            # Every config output's index, whatever was requested, as Triton's libtorch
            # backend checks them after each run.
            for name in self._output_types:
                if self._outputs[name] >= len(result):
                    raise _ConfigMismatch(
                        f"The output {name} in the model configuration refers to an output "
                        f"index which doesn't exist. This model has {len(result)} outputs"
                    )
        wanted = [o.name for o in request.requested_outputs] or list(self._outputs)
        outputs = []
        for name in wanted:
            value = result[name] if isinstance(result, dict) else result[self._outputs[name]]
            outputs.append(self._output(torch, name, value))
        return outputs

    def _output(self, torch: Any, name: str, value: Any) -> InferTensor:
        """Output `name` of what the model returned for it; TypeError, in Triton's words, for
        a value that cannot be that output."""
        if isinstance(value, list):
            return string_output(name, value)
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"output '{name}' must be of type Tensor or List[str], received "
                f"{type(value).__name__}"
            )
        array = _to_numpy(torch, value)
        datatype = "BF16" if value.dtype == torch.bfloat16 else numpy_to_v2(array.dtype)
        expected = self._output_types.get(name, datatype)  # a state's output: as it comes
        if expected != datatype:
            raise _ConfigMismatch(
                f"configuration expects datatype TYPE_{expected} for output '{name}', model "
                f"provides TYPE_{datatype}"
            )
        return InferTensor(name, datatype, tuple(array.shape), array)

    def unload(self) -> None:
        self._module = None
        if self._device != "cpu":
            import torch

            release_device_cache(torch, self._device)


def output_positions(names: list[str]) -> dict[str, int]:
    """The index in the model's returned tuple of each config output, by Triton's libtorch
    rule for outputs: `<name>__<i>` (at the first `__`, digits only) when every output is
    so named, whatever the indexes (one the model does not return fails each request), else
    config order. Inputs take `positions`, which also reads forward arguments' names."""
    indexes = {}
    for name in names:
        _, sep, index = name.partition("__")
        if not sep or not index.isdigit():
            return {n: i for i, n in enumerate(names)}
        indexes[name] = int(index)
    return indexes


class _ConfigMismatch(Exception):
    """What the model returned disagrees with its config (an output's datatype, an output
    index it does not have): the request's error, Triton's INVALID_ARG."""


def _config_datatype(data_type: int) -> str:
    """A config datatype as Triton's libtorch backend names it (`TYPE_STRING` is BYTES)."""
    name = mc.DataType.Name(data_type).removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def release_device_cache(torch: Any, device: str) -> bool:
    """Give the memory torch's caching allocator keeps for `device`, unused, back to the driver
    (after the unloaded module's tensors are collected). Without this, VRAM a torch model freed
    stays reserved by this process: an onnxruntime or TensorRT load (their own allocators)
    after it can run out of memory although the device budget, which counts torch's reserved
    memory as reusable, said it fits. False when CUDA was never initialized here."""
    if not torch.cuda.is_initialized():
        return False
    gc.collect()  # reference cycles may still hold device tensors of the unloaded module
    with torch.cuda.device(device):
        torch.cuda.empty_cache()
    return True


def _compile_settings(ctx: LoadContext) -> CompileSettings | None:
    """The model's `TORCH_COMPILE_OPTIONAL_PARAMETERS` (Triton's name), or None: no compile."""
    try:
        return compile_settings(ctx.config)
    except ModelConfigError as exc:
        raise RepositoryError(f"model '{ctx.model_name}': {exc}") from None


def _to_torch(torch: Any, tensor: InferTensor, device: str) -> Any:
    data = tensor.data
    if data.dtype == np.object_:
        return string_list(tensor)  # a TorchScript `List[str]`, on the host
    value = torch.from_numpy(np.ascontiguousarray(data))
    if tensor.datatype == "BF16":
        value = value.view(torch.bfloat16)
    return value.to(device) if device != "cpu" else value


def _one_list(torch: Any, result: Any) -> bool:
    """Whether the model returned one list output (a `List[str]`), not a list of outputs."""
    if not isinstance(result, list):
        return False
    return not result or not all(isinstance(value, torch.Tensor) for value in result)


def _to_numpy(torch: Any, value: Any) -> np.ndarray:
    value = value.detach()
    if value.device.type != "cpu":
        value = value.cpu()
    if value.dtype == torch.bfloat16:
        return np.asarray(value.view(torch.int16).numpy().view(np.uint16))
    return np.asarray(value.numpy())


def _apply(torch: Any, settings: TorchSettings) -> None:
    """The model's execution settings, on this thread (TorchScript's executor switches are
    per thread; cuDNN's is process-wide), before it runs, as Triton's libtorch backend sets
    them before each execution."""
    torch._C._set_graph_executor_optimize(settings.optimized_execution)
    if torch.backends.cudnn.enabled != settings.cudnn:
        torch.backends.cudnn.enabled = settings.cudnn
    if settings.jit_profiling is not None:
        torch._C._jit_set_profiling_mode(settings.jit_profiling)
    if settings.jit_executor is not None:
        torch._C._jit_set_profiling_executor(settings.jit_executor)
    if settings.tensor_fuser is not None:
        torch._C._jit_set_texpr_fuser_enabled(settings.tensor_fuser)


def _set_thread_counts(torch: Any, settings: TorchSettings, model: str) -> None:
    """INTRA_OP_THREAD_COUNT / INTER_OP_THREAD_COUNT, process-wide as in Triton. torch takes
    an inter-op count only before its first inter-op work: a later one is logged, not set."""
    if settings.intra_op_threads is not None and settings.intra_op_threads > 0:
        torch.set_num_threads(settings.intra_op_threads)
    count = settings.inter_op_threads
    if count is not None and count > 0 and torch.get_num_interop_threads() != count:
        try:
            torch.set_num_interop_threads(count)
        except RuntimeError as exc:
            logger.warning("model=%s INTER_OP_THREAD_COUNT %d not set: %s", model, count, exc)
