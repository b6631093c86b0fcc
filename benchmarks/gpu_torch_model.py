"""The small torch MLP the proofs load (TorchScript or exported), and its outputs on the CPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def torch_linear_model(repo: Path, name: str, *, extra: str = "", export: bool = False,
                       groups: str = "instance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]\n",
                       width: int = 256) -> Path:  # fmt: skip
    """A small torch MLP (Linear-ReLU-Linear), TorchScript `model.pt` or exported `model.pt2`,
    input INPUT__0 [width], batch up to 8."""
    import torch

    model_dir = repo / name
    version = model_dir / "1"
    version.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width)
    ).eval()
    if export:
        batch = torch.export.Dim("batch", min=1, max=8)
        program = torch.export.export(
            module, (torch.zeros(2, width),), dynamic_shapes=({0: batch},)
        )
        torch.export.save(program, str(version / "model.pt2"))
        filename = 'default_model_filename: "model.pt2"\n'
    else:
        torch.jit.script(module).save(str(version / "model.pt"))
        filename = ""
    (model_dir / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "pytorch_libtorch"\nmax_batch_size: 8\n{filename}'
        f'input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ {width} ] }} ]\n'
        f'output [ {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ {width} ] }} ]\n'
        f"{groups}{extra}"
    )
    return model_dir


def cpu_reference(model_dir: Path, x: np.ndarray) -> np.ndarray:
    import torch

    version = model_dir / "1"
    if (version / "model.pt2").exists():
        module = torch.export.load(str(version / "model.pt2")).module()
    else:
        module = torch.jit.load(str(version / "model.pt"), map_location="cpu")
    with torch.inference_mode():
        return np.asarray(module(torch.from_numpy(x)).numpy())
