"""Several model repositories served as one (tritonserver's repeatable --model-repository): the
models of all, a name in two unavailable with a reason, load threads bounded, auto-complete
off on request."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import numpy as np
import pytest

from runtime.config import ModelControlMode, ServeConfig
from runtime.errors import ControlDisabled, ModelUnavailable, RepositoryConflict, RepositoryError
from runtime.inference import InferRequest, InferTensor
from runtime.models.manager import ModelManager
from runtime.models.repository import Repositories, list_models
from runtime.observe.metrics import Metrics
from tests.fixtures.models import make_python_identity


def _manager(repos: list[Path], **settings: object) -> ModelManager:
    config = ServeConfig(repository=repos[0], more_repositories=tuple(repos[1:]), **settings)  # type: ignore[arg-type]
    return ModelManager(config, metrics=Metrics())


def _request(model: str) -> InferRequest:
    return InferRequest(model, "", [InferTensor("INPUT0", "FP32", (1,), np.ones(1, np.float32))])


def test_repositories_list_every_model_once_and_find_its_directory(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    make_python_identity(a, "one")
    make_python_identity(b, "two")
    make_python_identity(b, "one")
    repos = Repositories([a, b])
    assert list_models(repos) == ["one", "two"]
    assert repos / "two" == b / "two"
    assert repos.holders("one") == [a, b]
    assert Repositories([a]) / "anything" == a / "anything"


async def test_models_of_every_repository_serve_and_a_duplicate_is_unavailable(
    tmp_path: Path,
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    make_python_identity(a, "only_a")
    make_python_identity(b, "only_b")
    make_python_identity(a, "twice")
    make_python_identity(b, "twice")
    manager = _manager([a, b])
    await manager.start()
    try:
        rows = {row["name"]: row for row in await manager.index()}
        assert rows["only_a"]["state"] == rows["only_b"]["state"] == "READY"
        assert rows["twice"]["state"] == "UNAVAILABLE"
        assert "is in more than one model repository" in rows["twice"]["reason"]
        assert str(a) in rows["twice"]["reason"] and str(b) in rows["twice"]["reason"]
        for name in ("only_a", "only_b"):
            response = await manager.infer(_request(name))
            assert response.outputs[0].data.tolist() == [1.0]
        with pytest.raises(ModelUnavailable, match="more than one model repository"):
            await manager.infer(_request("twice"))
        assert not manager.is_ready()  # strict readiness: a model to load is not READY
    finally:
        await manager.stop()


async def test_model_load_thread_count_bounds_loads_at_once(tmp_path: Path) -> None:
    for i in range(4):
        make_python_identity(tmp_path, f"m{i}")
        (tmp_path / f"m{i}" / "1" / "model.py").write_text(textwrap.dedent("""
            import time, os
            import triton_python_backend_utils as pb_utils
            MARK = os.path.join(os.path.dirname(__file__), "..", "..", "loading")
            class TritonPythonModel:
                def initialize(self, args):
                    os.makedirs(MARK, exist_ok=True)
                    path = os.path.join(MARK, args["model_name"])
                    open(path, "w").close()
                    time.sleep(0.3)
                    self.peak = len(os.listdir(MARK))
                    os.remove(path)
                def execute(self, requests):
                    return [pb_utils.InferenceResponse([pb_utils.Tensor(
                        "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
                        * 0 + self.peak)]) for r in requests]
        """))  # fmt: skip
    manager = _manager([tmp_path], model_load_threads=1)
    await manager.start()
    try:
        peaks = [(await manager.infer(_request(f"m{i}"))).outputs[0].data[0] for i in range(4)]
        assert peaks == [1.0, 1.0, 1.0, 1.0]  # never two loads at once
    finally:
        await manager.stop()


async def test_disabled_auto_complete_skips_the_models_own_completion(tmp_path: Path) -> None:
    model = make_python_identity(tmp_path, "completes")
    (model / "config.pbtxt").write_text('name: "completes"\nbackend: "python"\n')
    (model / "1" / "model.py").write_text(textwrap.dedent("""
        import triton_python_backend_utils as pb_utils
        class TritonPythonModel:
            @staticmethod
            def auto_complete_config(config):
                config.add_input({"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [1]})
                config.add_output({"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [1]})
                return config
            def execute(self, requests):
                return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0",
                        pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
                        for r in requests]
    """))  # fmt: skip
    for auto, inputs in ((True, ["INPUT0"]), (False, [])):
        manager = _manager([tmp_path], auto_complete_config=auto)
        await manager.start()
        try:
            metadata = manager.metadata("completes", None)
            assert [i["name"] for i in metadata["inputs"]] == inputs
        finally:
            await manager.stop()
        await asyncio.sleep(0)


def test_explicit_mode_with_several_repositories_is_a_config() -> None:
    config = ServeConfig(
        repository=Path("a"), more_repositories=(Path("b"),),
        model_control_mode=ModelControlMode.EXPLICIT,
    )  # fmt: skip
    assert config.repositories == (Path("a"), Path("b"))


def test_a_registered_repository_maps_names_to_its_directories(tmp_path: Path) -> None:
    base, extra = tmp_path / "base", tmp_path / "extra"
    make_python_identity(base, "kept")
    make_python_identity(extra, "model")
    make_python_identity(extra, "step")
    repos = Repositories([base])
    repos.register(extra, {"served_as": "model"})
    assert list_models(repos) == ["kept", "served_as", "step"]
    assert repos / "served_as" == extra / "model"
    assert repos.holders("served_as") == [extra]
    assert repos.holders("model") == []  # a mapped directory is no model under its own name
    assert repos.scope(extra) / "served_as" == extra / "model"
    assert repos.scope(extra) / "step" == extra / "step"
    with pytest.raises(RepositoryConflict, match="has already been registered"):
        repos.register(extra, {})
    with pytest.raises(RepositoryConflict, match="conflicting mapping for 'served_as'"):
        repos.register(tmp_path, {"served_as": "x"})
    repos.unregister(extra)
    assert list_models(repos) == ["kept"] and repos.holders("served_as") == []
    with pytest.raises(RepositoryError, match="repository not found"):
        repos.unregister(extra)
    with pytest.raises(RepositoryError, match="the only repository"):
        repos.unregister(base)


async def test_a_mapped_model_loads_under_its_mapped_name_and_goes_with_its_repository(
    tmp_path: Path,
) -> None:
    base, extra = tmp_path / "base", tmp_path / "extra"
    base.mkdir()
    make_python_identity(extra, "model")  # its config says name "model"
    manager = _manager([base], model_control_mode=ModelControlMode.EXPLICIT)
    await manager.start()
    try:
        await manager.register_repository(extra, {"mapped": "model"})
        await manager.load("mapped")
        assert manager.config("mapped", None)["name"] == "mapped"
        response = await manager.infer(_request("mapped"))
        assert response.outputs[0].data.tolist() == [1.0]
        await manager.unload("mapped")
        await manager.unregister_repository(extra)
        assert [row["name"] for row in await manager.index()] == []
        with pytest.raises(RepositoryError, match="repository not found"):
            await manager.register_repository(tmp_path / "nowhere", {})
    finally:
        await manager.stop()


async def test_registration_needs_explicit_model_control(tmp_path: Path) -> None:
    manager = _manager([tmp_path])
    with pytest.raises(ControlDisabled, match="not allowed if model control mode is not EXPLICIT"):
        await manager.register_repository(tmp_path, {})
