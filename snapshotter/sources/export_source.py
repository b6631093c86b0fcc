"""`torch.export` programs (`model.pt2`): the state dict moves into the image, the program stays.

The weightless program (artifact `export_weightless`) is the same ExportedProgram with every
`state_dict` entry replaced by an empty tensor of its dtype. The runtime loads it with
`torch.export.load(io.BytesIO(blob))`, puts each arena view back into `ep.state_dict[name]`
(wrapped in `torch.nn.Parameter(view, requires_grad=False)` where the entry was a Parameter)
and calls `ep.module()`. Lifted constants (`ep.constants`) stay inside the program.
"""

from __future__ import annotations

import io
from pathlib import Path

from snapshotter.errors import BuildError
from snapshotter.sources import ExtractedModel
from snapshotter.sources.torchscript_source import to_source_tensor


def extract_exported(path: Path) -> ExtractedModel:
    """Read a `torch.export` archive into image tensors + a weightless archive."""
    import torch

    try:
        program = torch.export.load(str(path))
    except Exception as exc:  # torch raises RuntimeError, KeyError, zipfile errors...
        raise BuildError(f"{path}: not a loadable torch.export program: {exc}") from exc
    state = program.state_dict
    if not state:
        raise BuildError(f"{path}: the program has no state dict to snapshot")
    tensors = [to_source_tensor(name, tensor) for name, tensor in state.items()]
    for name, tensor in list(state.items()):
        empty = torch.empty(0, dtype=tensor.dtype)
        is_param = isinstance(tensor, torch.nn.Parameter)
        state[name] = torch.nn.Parameter(empty, requires_grad=False) if is_param else empty
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    return ExtractedModel(
        framework="torch_export",
        tensors=tensors,
        artifacts={"export_weightless": buffer.getvalue()},
        framework_versions={"torch": torch.__version__},
    )
