"""Triton's Python-based backends (both servers read them: `thaw serve` runs them, `thaw up`
scans its repository with them): a config's `backend: "NAME"` that is none of Thaw's own
backends runs as a Python model whose `model.py` is `<backend directory>/NAME/model.py`.

This is how Triton runs vllm_backend (`backends/vllm/model.py`, every `backend: "vllm"` model
sharing it): the model's own directory holds only its config and version directories (with the
files the model reads, found through `pb_utils.get_model_dir()`). The stub imports the shared
model.py with its directory on `sys.path`, so the backend's own modules beside it import.

One Python-based backend is built in, as Triton ships it in its PyTorch backend's directory:
`backend: "pytorch"` with `runtime: "model.py"` (`pytorch_python_runtime`) runs the PyTorch
backend's Python runtime (runtime/python/pytorch_runtime), with no `--backend-directory`.
"""

from __future__ import annotations

from pathlib import Path

from tritonconfig.platform import known_backends
from tritonconfig.schema import mc

__all__ = ["python_based_model_file", "pytorch_python_runtime"]


def pytorch_python_runtime(config: mc.ModelConfig) -> bool:
    """Whether `config` asks for the PyTorch backend's Python runtime (Triton's "PyTorch 2.0
    backend"): `backend: "pytorch"` with `runtime: "model.py"`."""
    return config.backend == "pytorch" and config.runtime == "model.py"


def python_based_model_file(backend: str, backend_directory: Path | None) -> Path | None:
    """`<backend_directory>/<backend>/model.py` when `backend` is a Python-based backend there;
    None for Thaw's own backends, an empty name, no directory, or no such file (then the
    config's backend is refused as unsupported, as before)."""
    if not backend or backend in known_backends() or backend_directory is None:
        return None
    if "/" in backend or "\0" in backend or backend in (".", ".."):  # a name, not a path
        return None
    model_file = backend_directory / backend / "model.py"
    return model_file if model_file.is_file() else None
