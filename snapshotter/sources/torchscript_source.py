"""TorchScript models: parameters and buffers move into the image; the archive keeps none.

The weightless archive (artifact `torchscript_weightless`) is the same module with every
parameter and buffer replaced by an empty tensor of its dtype. The runtime loads it with
`torch.jit.load` and, under `torch.no_grad()`, points each `named_parameters()` /
`named_buffers()` entry at its arena view with `tensor.set_(view)`; tied weights stay tied
because the archive keeps one tensor object for them.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from snapshotter.errors import BuildError
from snapshotter.manifest import DTYPES
from snapshotter.sources import ExtractedModel, SourceTensor


def torch_state(module: Any) -> list[tuple[str, Any]]:
    """The module's parameters then buffers (deduplicated), in definition order."""
    return list(module.named_parameters()) + list(module.named_buffers())


def to_source_tensor(name: str, tensor: Any) -> SourceTensor:
    """A CPU torch tensor as a manifest dtype + C-contiguous numpy array (bf16 as uint16)."""
    import torch

    dtype = str(tensor.dtype).removeprefix("torch.")
    if dtype not in DTYPES or tensor.is_sparse or tensor.is_quantized:
        raise BuildError(f"tensor {name!r}: dtype/layout {tensor.dtype} is not supported")
    data = tensor.detach().to("cpu").contiguous()
    if dtype == "bfloat16":
        return SourceTensor(name, dtype, data.view(torch.int16).numpy().view("uint16"))
    return SourceTensor(name, dtype, data.numpy())


def extract_torchscript(path: Path) -> ExtractedModel:
    """Read a TorchScript archive into image tensors + a weightless archive."""
    import torch

    try:
        module = torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:  # torch raises RuntimeError, ValueError, zipfile errors...
        raise BuildError(f"{path}: not a loadable TorchScript archive: {exc}") from exc
    state = torch_state(module)
    if not state:
        raise BuildError(f"{path}: the module has no parameters or buffers to snapshot")
    tensors = [to_source_tensor(name, t) for name, t in state]
    with torch.no_grad():
        for _, t in state:
            t.set_(torch.empty(0, dtype=t.dtype))
    buffer = io.BytesIO()
    torch.jit.save(module, buffer)
    return ExtractedModel(
        framework="torchscript",
        tensors=tensors,
        artifacts={"torchscript_weightless": buffer.getvalue()},
        framework_versions={"torch": torch.__version__},
    )
