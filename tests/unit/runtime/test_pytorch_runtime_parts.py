"""The PyTorch Python runtime's pure parts (runtime/python/pytorch_runtime/model.py): requests
joined into one batch and split back, its settings read from the config, the model file and
class found as Triton's runtime finds them."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from runtime.python import pb_utils


@pytest.fixture(scope="module")
def runtime() -> ModuleType:
    # The name a model file imports pb_utils by, as the stub process provides it.
    sys.modules.setdefault("triton_python_backend_utils", pb_utils)
    return importlib.import_module("runtime.python.pytorch_runtime.model")


def test_requests_are_joined_and_each_gets_its_own_rows_back(runtime: ModuleType) -> None:
    a = [torch.arange(2).reshape(2, 1), torch.arange(6).reshape(2, 3)]
    b = [torch.tensor([[9]]), torch.tensor([[7, 8, 9]])]
    joined, sections = runtime.gather([a, b])
    assert sections == [2, 1]
    assert joined[0].tolist() == [[0], [1], [9]]
    assert joined[1].shape == (3, 3)
    back = runtime.scatter(joined, sections)
    assert [[t.tolist() for t in request] for request in back] == [
        [[[0], [1]], [[0, 1, 2], [3, 4, 5]]],
        [[[9]], [[7, 8, 9]]],
    ]


def test_settings_from_the_config(runtime: ModuleType) -> None:
    def config(**params: str) -> dict[str, object]:
        return {"parameters": {k: {"string_value": v} for k, v in params.items()}}

    assert runtime.compile_parameters(config()) == {}
    assert runtime.compile_parameters(
        config(TORCH_COMPILE_OPTIONAL_PARAMETERS='{"disable": true, "mode": "max-autotune"}')
    ) == {"disable": True, "mode": "max-autotune"}
    for text, words in (
        ('{"model": 1}', "'model' is not an optional parameter"),
        ("[1]", "must be a JSON object"),
        ("{", "is not valid JSON"),
    ):
        with pytest.raises(pb_utils.TritonModelException, match=words):
            runtime.compile_parameters(config(TORCH_COMPILE_OPTIONAL_PARAMETERS=text))
    with pytest.raises(pb_utils.TritonModelException, match="NUM_THREADS must be an integer"):
        runtime.set_parallelism(config(NUM_THREADS="many"))


def test_the_model_file_and_class_are_found_as_tritons_runtime_finds_them(
    runtime: ModuleType, tmp_path: Path
) -> None:
    (tmp_path / "model.pt").touch()
    assert runtime.model_path({}, str(tmp_path)) == str(tmp_path / "model.pt")
    (tmp_path / "model.py").touch()
    assert runtime.model_path({}, str(tmp_path)) == str(tmp_path / "model.py")
    (tmp_path / "net.py").touch()
    named = {"default_model_filename": "net.py"}
    assert runtime.model_path(named, str(tmp_path)) == str(tmp_path / "net.py")
    assert runtime.state_dict_path(str(tmp_path / "model.py")) == str(tmp_path / "model.pt")
    assert runtime.state_dict_path(str(tmp_path / "net.py")) == ""
    with pytest.raises(pb_utils.TritonModelException, match="No model found in"):
        runtime.model_path({}, str(tmp_path / "nowhere"))

    alpha = type("Alpha", (torch.nn.Module,), {})
    module = ModuleType("m")
    for name, value in (("Zeta", type("Zeta", (torch.nn.Module,), {})), ("Alpha", alpha),
                        ("helper", len)):  # fmt: skip
        setattr(module, name, value)
    assert runtime.module_class(module) is alpha
    with pytest.raises(pb_utils.TritonModelException, match=r"subclass of torch\.nn\.Module"):
        runtime.module_class(ModuleType("empty"))
