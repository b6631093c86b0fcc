"""The PyTorch backend's Python runtime (Triton's `backend: "pytorch"` with `runtime:
"model.py"`): a model's `torch.nn.Module` class in its model.py (weights from the model.pt
beside it) or its TorchScript model.pt, run as a Python model in stub processes.

    model    the runtime itself: the `TritonPythonModel` every such model runs (a model file,
             imported by path in the model's stub process, never by the server)

`MODEL_FILE` is its path, which the repository gives such a model as its Python model file
(runtime.models.repository).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["MODEL_FILE"]

MODEL_FILE = Path(__file__).with_name("model.py")
