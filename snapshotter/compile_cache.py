"""`torch.compile` of torch.export programs, and its caches as image artifacts.

Opt-in per model with the parameter Triton's PyTorch backend uses for `torch.compile`,
`TORCH_COMPILE_OPTIONAL_PARAMETERS` (parsed by `tritonconfig.torch_compile`): when present, the
runtime compiles the program's `.module()` and warms it up at load with one sample batch per
input (`warmup_inputs`: the config's dims, 1 for a variable dim and for the batch). TorchScript
modules cannot be compiled (torch.compile refuses `torch.jit` modules), so the parameter
applies to `model.pt2` only.

A cold compile spends its time in dynamo tracing, AOT autograd, inductor's lowering and code
generation, and, on CPU, g++ building the generated C++ kernels. An image carries two artifacts
that skip most of it, each keyed (`compile_key`) by target, torch version, compile settings and
the warm-up inputs:

- `torch_compile_cache`: PyTorch's portable cache (`torch.compiler.save_cache_artifacts()`
  after the build's warm-up; `load_cache_artifacts()` before the runtime compiles): the AOT
  autograd and inductor FX-graph entries. Portable across hosts of the same target.
- `torch_compile_kernels`: inductor's cache directory after that warm-up, packed: the compiled
  kernels themselves (C++ shared objects on CPU, Triton binaries on CUDA), which the portable
  cache does not hold. Native code, so it is also keyed by the CPU (`cpu_host`); inductor
  finds its kernels there by the hash of their source and compile command.

The blobs are pickles and shared objects made by the builder: an image is trusted as much as
the model files it was built from, and its digests prove it is the image that was built.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snapshotter.artifact_key import cpu_host, settings_digest, short
from snapshotter.errors import ArtifactError
from tritonconfig.torch_compile import CompileSettings

logger = logging.getLogger(__name__)

CACHE_ARTIFACT = "torch_compile_cache"
KERNELS_ARTIFACT = "torch_compile_kernels"

# Triton data types a warm-up input can be made of, as torch dtype names.
_DTYPES = {
    "TYPE_BOOL": "bool",
    "TYPE_UINT8": "uint8",
    "TYPE_INT8": "int8",
    "TYPE_INT16": "int16",
    "TYPE_INT32": "int32",
    "TYPE_INT64": "int64",
    "TYPE_FP16": "float16",
    "TYPE_BF16": "bfloat16",
    "TYPE_FP32": "float32",
    "TYPE_FP64": "float64",
}
# torch.compile reads inductor's cache directory from the process environment: one compile at
# a time points it at the directory that compile uses.
_COMPILE_LOCK = threading.Lock()


@dataclass(frozen=True)
class WarmupInput:
    """One sample input of the warm-up: config name, torch dtype name, shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]


def warmup_inputs(config: Any) -> list[WarmupInput] | None:
    """One sample per config input (variable dims and the batch dim as 1), or None when an
    input has a type a sample cannot be made of (strings)."""
    # The enum through the message's own descriptor: importing `tritonclient.grpc` here would
    # pull in grpc, which the runtime avoids (tritonconfig/schema.py).
    names = config.DESCRIPTOR.file.enum_types_by_name["DataType"].values_by_number
    batch = (1,) if config.max_batch_size > 0 else ()
    out = []
    for tensor in config.input:
        value = names.get(tensor.data_type)
        dtype = _DTYPES.get(value.name) if value is not None else None
        if dtype is None:
            return None
        dims = tuple(d if d > 0 else 1 for d in tensor.dims)
        out.append(WarmupInput(tensor.name, dtype, batch + dims))
    return out


def compile_key(
    target: str, settings: CompileSettings, inputs: list[WarmupInput], *, kernels: bool = False
) -> dict[str, str]:
    """What a compile artifact depends on; `kernels` adds the CPU (native code)."""
    import torch

    shapes = ";".join(f"{i.dtype}[{','.join(map(str, i.shape))}]" for i in inputs)
    key = {
        "target": target,
        "torch": short(torch.__version__),
        "settings": settings_digest(settings.kwargs()),
        "inputs": short(shapes),
    }
    if kernels:
        key["host"] = cpu_host() if target == "cpu" else _triton_version()
    return key


def _triton_version() -> str:
    try:
        import triton

        return f"triton-{triton.__version__}"
    except ImportError:
        return "no-triton"


def sample_args(inputs: list[WarmupInput], positions: Mapping[str, int], device: str) -> list[Any]:
    """Deterministic warm-up tensors in forward-argument order (`positions`: name -> index)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    args: list[Any] = [None] * len(inputs)
    # Made under inference_mode like the runtime's request tensors: dynamo guards on a
    # tensor's dispatch keys, and an ordinary tensor here would make the first request
    # recompile.
    with torch.inference_mode():
        for spec in inputs:
            dtype = getattr(torch, spec.dtype)
            if dtype.is_floating_point:
                value = torch.rand(spec.shape, generator=gen).to(dtype)
            else:
                value = torch.zeros(spec.shape, dtype=dtype)
            args[positions[spec.name]] = value.to(device)
    return args


@contextlib.contextmanager
def inductor_cache_dir(directory: Path) -> Iterator[None]:
    """Run one compile with inductor's cache in `directory` (serialized: process-wide)."""
    from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir

    with _COMPILE_LOCK, temporary_cache_dir(str(directory)):
        yield


def compile_and_warm(
    module: Any, settings: CompileSettings, args: list[Any] | None, cache_dir: Path | None
) -> tuple[Any, Any]:
    """`torch.compile(module)` and, given sample `args`, its first call (which compiles) under
    `inference_mode` as the runtime serves; inductor's cache in `cache_dir` when given.
    Returns (compiled module, warm-up outputs or None)."""
    import torch

    # Served modules never train; parameters that do not require grad also make the graph
    # (and so the cache keys) the same whether weights came from a file or an image.
    module.requires_grad_(False)
    scope: contextlib.AbstractContextManager[Any] = (
        inductor_cache_dir(cache_dir) if cache_dir is not None else _COMPILE_LOCK
    )
    with scope:
        compiled = torch.compile(module, **settings.kwargs())
        if args is None:
            return compiled, None
        start = time.perf_counter()
        with torch.inference_mode():
            outputs = compiled(*args)
        logger.debug("compile + warm-up in %.2f s", time.perf_counter() - start)
        return compiled, outputs


def load_portable_cache(blob: bytes, cache_dir: Path | None) -> None:
    """Hot-load a `torch_compile_cache` artifact into inductor's cache (`cache_dir`, else the
    process default), so the next compile of the same graph finds its entries."""
    import torch

    scope: contextlib.AbstractContextManager[Any] = (
        inductor_cache_dir(cache_dir) if cache_dir is not None else _COMPILE_LOCK
    )
    with scope:
        torch.compiler.load_cache_artifacts(blob)


def arg_positions(names: list[str], forward_args: list[str]) -> dict[str, int]:
    """Forward-argument index of each config input, by Triton's PyTorch rule (the runtime's):
    `<prefix>__<i>` names, else the forward arguments' names, else config order."""
    matches = [re.match(r"^.+__(\d+)$", n) for n in names]
    if names and all(matches):
        indexes = {n: int(m.group(1)) for n, m in zip(names, matches, strict=True) if m}
        if sorted(indexes.values()) == list(range(len(names))):
            return indexes
    if names and all(n in forward_args for n in names):
        return {n: forward_args.index(n) for n in names}
    return {n: i for i, n in enumerate(names)}


def device_target(device: str) -> str:
    """The image target a torch device compiles for: `cpu`, or `cuda:sm_NN` of that GPU."""
    if device == "cpu":
        return "cpu"
    from snapshotter.gpu_probe import cuda_target

    _, _, index = device.partition(":")
    return cuda_target(int(index or 0))  # NVML first: no CUDA context just for this


def compile_for_serving(
    module: Any,
    settings: CompileSettings,
    inputs: list[WarmupInput] | None,
    positions: Mapping[str, int],
    *,
    device: str,
    image: Any | None,
) -> Any:
    """The runtime's compile: the image's caches when they were built for this target, torch
    and settings (else a log line says why and inductor starts cold), then compile and warm up
    with the same sample inputs the build used. Returns the compiled module."""
    target = device_target(device)
    cache_dir: Path | None = None
    if image is not None and inputs is not None:
        kernels = image.keyed_artifact(
            KERNELS_ARTIFACT, compile_key(target, settings, inputs, kernels=True)
        )
        if kernels is not None:
            try:
                cache_dir = image.unpack(KERNELS_ARTIFACT)
            except ArtifactError as exc:
                logger.warning("model=%s compiled kernels in the image are unusable (%s); "
                               "compiling them", image.ref.model, exc)  # fmt: skip
        portable = image.keyed_artifact(CACHE_ARTIFACT, compile_key(target, settings, inputs))
        if portable is not None:
            load_portable_cache(portable, cache_dir)
    args = sample_args(inputs, positions, device) if inputs is not None else None
    compiled, _ = compile_and_warm(module, settings, args, cache_dir)
    return compiled
