"""`TORCH_COMPILE_OPTIONAL_PARAMETERS` in the torch backend: torch.export programs are compiled
and warmed up at load and answer like eager; TorchScript and malformed settings are refused.

The compile here uses dynamo with the `eager` backend (seconds, no C++ build); inductor and
the image's compile caches are exercised in tests/integration/snapshotter (slow)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from runtime.backends.base import LoadContext
from runtime.backends.torch_backend import TorchBackend
from runtime.errors import RepositoryError
from runtime.inference import InferRequest, InferTensor
from runtime.model_config import parse_config
from tests.fixtures.torch_models import make_torch_export_linear, make_torchscript_linear

PARAM = "TORCH_COMPILE_OPTIONAL_PARAMETERS"


def _with_param(model_dir: Path, value: str) -> Path:
    config = model_dir / "config.pbtxt"
    escaped = value.replace('"', '\\"')
    config.write_text(
        config.read_text()
        + f'\nparameters {{ key: "{PARAM}" value {{ string_value: "{escaped}" }} }}\n'
    )
    return model_dir


def _load(model_dir: Path, filename: str) -> TorchBackend:
    config = parse_config((model_dir / "config.pbtxt").read_text(), str(model_dir))
    backend = TorchBackend()
    backend.load(
        LoadContext(
            model_name=model_dir.name,
            version="1",
            version_dir=model_dir / "1",
            model_dir=model_dir,
            config=config,
            instance_kind="KIND_CPU",
            device_id=0,
            model_file=model_dir / "1" / filename,
        )
    )
    return backend


def _run(backend: TorchBackend, x: np.ndarray) -> np.ndarray:
    request = InferRequest("m", "1", [InferTensor("INPUT__0", "FP32", x.shape, x)])
    (response,) = backend.execute([request])
    return np.asarray(response.outputs[0].data)  # type: ignore[union-attr]


def test_compiled_export_program_answers_like_eager(tmp_path: Path) -> None:
    import torch

    eager = _load(make_torch_export_linear(tmp_path / "a"), "model.pt2")
    compiled_dir = _with_param(make_torch_export_linear(tmp_path / "b"), '{"backend": "eager"}')
    compiled = _load(compiled_dir, "model.pt2")
    assert isinstance(compiled._module, torch._dynamo.eval_frame.OptimizedModule)
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    np.testing.assert_allclose(_run(compiled, x), _run(eager, x), rtol=1e-6, atol=1e-6)


def test_disabled_compile_loads_eagerly(tmp_path: Path) -> None:
    import torch

    model_dir = _with_param(make_torch_export_linear(tmp_path), '{"disable": true}')
    backend = _load(model_dir, "model.pt2")
    assert not isinstance(backend._module, torch._dynamo.eval_frame.OptimizedModule)


def test_torchscript_with_compile_is_refused_clearly(tmp_path: Path) -> None:
    model_dir = _with_param(make_torchscript_linear(tmp_path), "{}")
    with pytest.raises(RepositoryError, match=f"{PARAM}.*torch.export programs"):
        _load(model_dir, "model.pt")


def test_malformed_compile_settings_fail_the_load_with_the_parameter_named(
    tmp_path: Path,
) -> None:
    model_dir = _with_param(make_torch_export_linear(tmp_path), '{"mode": "warp-speed"}')
    with pytest.raises(RepositoryError, match=f"{PARAM}.*`mode` = 'warp-speed'"):
        _load(model_dir, "model.pt2")
