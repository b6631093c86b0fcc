"""ModelManager: control modes, index states and reasons, load/unload/reload, poll, readiness."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from runtime.config import ModelControlMode, ServeConfig
from runtime.errors import (
    ControlDisabled,
    InvalidInput,
    ModelNotFound,
    ModelNotLoaded,
    ModelUnavailable,
    RepositoryError,
)
from runtime.inference import InferRequest, InferTensor
from runtime.models.manager import ModelManager
from runtime.models.repository import list_models
from runtime.observe.metrics import Metrics
from tests.fakes.loop import HUNG_AFTER_S, eventually
from tests.fixtures.models import (
    make_add_sub,
    make_python_identity,
    make_slow_execute,
    make_slow_init,
)
from tests.fixtures.onnx_models import make_onnx_identity


def _manager(repo: Path, mode: ModelControlMode, *load: str, poll_s: float = 15.0) -> ModelManager:
    config = ServeConfig(
        repository=repo, model_control_mode=mode, load_models=load, repository_poll_secs=poll_s
    )
    return ModelManager(config, metrics=Metrics())


def _identity_request(model: str, value: float = 1.0) -> InferRequest:
    data = np.array([value], dtype=np.float32)
    return InferRequest(model, "", [InferTensor("INPUT0", "FP32", (1,), data)])


async def _states(manager: ModelManager) -> dict[str, str | None]:
    return {row["name"]: row.get("state") for row in await manager.index()}


async def test_none_mode_loads_all_and_broken_models_do_not_hurt_others(tmp_path: Path) -> None:
    make_python_identity(tmp_path, "good")
    broken = make_python_identity(tmp_path, "broken")
    (broken / "config.pbtxt").write_text('name: "broken"\nmax_batch_size: "x"\n')
    truncated = make_python_identity(tmp_path, "truncated")
    (truncated / "1" / "model.py").write_text("class TritonPythonModel:\n    def execute(self")
    manager = _manager(tmp_path, ModelControlMode.NONE)
    await manager.start()
    try:
        rows = {row["name"]: row for row in await manager.index()}
        assert rows["good"]["state"] == "READY" and rows["good"]["version"] == "1"
        assert rows["broken"]["state"] == "UNAVAILABLE"
        assert "broken/config.pbtxt:2" in rows["broken"]["reason"]
        assert rows["truncated"]["state"] == "UNAVAILABLE"
        assert "SyntaxError" in rows["truncated"]["reason"]
        assert not manager.is_ready()  # strict readiness, as Triton
        assert [r["name"] for r in await manager.index(ready_only=True)] == ["good"]
        response = await manager.infer(_identity_request("good", 2.5))
        assert response.outputs[0].data.tolist() == [2.5]
        with pytest.raises(ModelUnavailable, match=r"config\.pbtxt:2"):
            await manager.infer(_identity_request("broken"))
        with pytest.raises(ControlDisabled, match="not allowed"):
            await manager.load("good")
        with pytest.raises(ControlDisabled):
            await manager.unload("good")
    finally:
        await manager.stop()


async def test_explicit_mode_load_unload_and_index(tmp_path: Path) -> None:
    make_python_identity(tmp_path, "a")
    make_python_identity(tmp_path, "b")
    manager = _manager(tmp_path, ModelControlMode.EXPLICIT, "a")
    await manager.start()
    try:
        assert manager.is_ready()
        assert await manager.index() == [
            {"name": "a", "version": "1", "state": "READY"},  # no empty reason (Triton 2.51)
            {"name": "b"},
        ]
        assert not manager.model_ready("b", None)
        with pytest.raises(ModelNotLoaded) as never_loaded:
            await manager.infer(_identity_request("b"))
        assert never_loaded.value.model == "b" and never_loaded.value.status == 503
        await manager.load("b")
        assert manager.model_ready("b", None) and manager.model_ready("b", "1")
        assert not manager.model_ready("b", "2")
        await manager.unload("a")
        assert (await _states(manager))["a"] == "UNAVAILABLE"
        assert (await manager.index())[0]["reason"] == "unloaded"
        # Triton's words and code for a model unloaded on request (its NOT_FOUND).
        with pytest.raises(
            ModelNotLoaded, match=r"^Request for unknown model: 'a' has no available versions$"
        ) as unloaded:
            await manager.infer(_identity_request("a"))
        assert unloaded.value.model == "a" and unloaded.value.status == 404
        with pytest.raises(ModelNotFound):
            await manager.load("missing")
        assert "missing" not in (await _states(manager))
        with pytest.raises(ModelNotFound):
            await manager.load("../a")
        with pytest.raises(ModelNotFound):
            manager.metadata("nope", None)
    finally:
        await manager.stop()


async def test_loading_a_typo_keeps_the_server_ready_and_leaves_no_entry(tmp_path: Path) -> None:
    make_python_identity(tmp_path, "a")
    manager = _manager(tmp_path, ModelControlMode.EXPLICIT, "a")
    await manager.start()
    try:
        loading = asyncio.create_task(manager.load("a_typo"))
        await asyncio.sleep(0)  # the load is now in flight
        assert manager.is_ready()  # a replica must not drop out of readiness meanwhile
        with pytest.raises(ModelNotFound, match="'a_typo'"):
            await loading
        assert manager.is_ready()
        assert [row["name"] for row in await manager.index()] == ["a"]
        with pytest.raises(ModelNotFound, match="'a_typo'"):
            await manager.load("a_typo")  # and again: still no entry left behind
        assert manager.is_ready()
    finally:
        await manager.stop()


async def test_explicit_mode_with_nothing_loaded_is_ready(tmp_path: Path) -> None:
    make_python_identity(tmp_path, "a")
    manager = _manager(tmp_path, ModelControlMode.EXPLICIT)
    await manager.start()
    assert manager.is_ready()
    assert await manager.index(ready_only=True) == []
    await manager.stop()


async def test_failed_load_leaves_reason_and_failed_reload_keeps_old_version(
    tmp_path: Path,
) -> None:
    model_dir = make_python_identity(tmp_path, "m")
    manager = _manager(tmp_path, ModelControlMode.EXPLICIT, "m")
    await manager.start()
    try:
        good_config = (model_dir / "config.pbtxt").read_text()
        (model_dir / "config.pbtxt").write_text("input [ { name: ")
        with pytest.raises(RepositoryError, match=r"config\.pbtxt"):
            await manager.load("m")
        # The old version keeps serving; the index says why the reload failed.
        response = await manager.infer(_identity_request("m", 4.0))
        assert response.outputs[0].data.tolist() == [4.0]
        assert "reload failed" in (await manager.index())[0]["reason"]
        await manager.unload("m")
        with pytest.raises(RepositoryError):
            await manager.load("m")
        assert (await manager.index())[0]["state"] == "UNAVAILABLE"
        assert "config.pbtxt" in (await manager.index())[0]["reason"]
        (model_dir / "config.pbtxt").write_text(good_config)
        await manager.load("m")
        assert (await manager.index())[0]["state"] == "READY"
    finally:
        await manager.stop()


async def test_load_with_config_override(tmp_path: Path) -> None:
    make_add_sub(tmp_path)
    manager = _manager(tmp_path, ModelControlMode.EXPLICIT)
    await manager.start()
    try:
        override = {
            "backend": "python",
            "max_batch_size": 2,
            "input": [{"name": f"INPUT{i}", "data_type": "TYPE_FP32", "dims": [4]} for i in (0, 1)],
            "output": [
                {"name": f"OUTPUT{i}", "data_type": "TYPE_FP32", "dims": [4]} for i in (0, 1)
            ],
        }
        await manager.load("add_sub", config_json=json.dumps(override))
        assert manager.config("add_sub", None)["max_batch_size"] == 2
        assert manager.metadata("add_sub", None)["inputs"][0]["shape"] == [-1, 4]
        with pytest.raises(RepositoryError):
            await manager.load("add_sub", config_json="{not json")
        assert manager.model_ready("add_sub", None)  # bad override keeps the old one
    finally:
        await manager.stop()


async def test_load_with_files_override_never_writes_outside(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    make_python_identity(repo, "m")
    source = (repo / "m" / "1" / "model.py").read_bytes()
    manager = _manager(repo, ModelControlMode.EXPLICIT)
    await manager.start()
    try:
        config = json.dumps({"backend": "python", "input": [{"name": "INPUT0",
            "data_type": "TYPE_FP32", "dims": [-1]}], "output": [{"name": "OUTPUT0",
            "data_type": "TYPE_FP32", "dims": [-1]}]})  # fmt: skip
        with pytest.raises(InvalidInput, match="not a relative path"):
            await manager.load("m", config_json=config, files={"../../evil.py": b"x"})
        assert not (tmp_path / "evil.py").exists()
        with pytest.raises(InvalidInput):
            await manager.load("m", files={"1/model.py": source})
        await manager.load("m", config_json=config, files={"3/model.py": source})
        assert manager.metadata("m", None)["versions"] == ["3"]
    finally:
        await manager.stop()


async def test_poll_mode_loads_new_reloads_changed_unloads_removed(tmp_path: Path) -> None:
    make_python_identity(tmp_path, "a")
    manager = _manager(tmp_path, ModelControlMode.POLL, poll_s=3600)
    await manager.start()
    try:
        assert (await _states(manager)) == {"a": "READY"}
        make_python_identity(tmp_path, "b")
        await manager.poll_once()
        assert (await _states(manager)) == {"a": "READY", "b": "READY"}
        # Change a: new version 2 appears -> reloaded to serve version 2.
        (tmp_path / "a" / "2").mkdir()
        (tmp_path / "a" / "2" / "model.py").write_bytes(
            (tmp_path / "a" / "1" / "model.py").read_bytes()
        )
        await manager.poll_once()
        assert manager.metadata("a", None)["versions"] == ["2"]
        for path in sorted((tmp_path / "b").rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        os.rmdir(tmp_path / "b")
        await manager.poll_once()
        # unloaded, and no longer in the repository: no index row, as in Triton's index
        assert (await _states(manager)) == {"a": "READY"}
        assert not manager.model_ready("b", None)
        with pytest.raises(ControlDisabled):
            await manager.load("a")
    finally:
        await manager.stop()


async def test_poll_retries_a_broken_model_only_when_its_files_change(tmp_path: Path) -> None:
    model_dir = make_python_identity(tmp_path, "m")
    good = (model_dir / "config.pbtxt").read_text()
    (model_dir / "config.pbtxt").write_text("garbage {")
    metrics = Metrics()
    config = ServeConfig(
        repository=tmp_path, model_control_mode=ModelControlMode.POLL, repository_poll_secs=3600
    )
    manager = ModelManager(config, metrics=metrics)
    await manager.start()
    try:
        await manager.poll_once()
        await manager.poll_once()
        assert 'thaw_model_load_failures_total{model="m"} 1\n' in metrics.exposition().decode()
        (model_dir / "config.pbtxt").write_text(good)
        await manager.poll_once()
        assert (await _states(manager)) == {"m": "READY"}
    finally:
        await manager.stop()


async def test_poll_task_runs_on_its_own(tmp_path: Path) -> None:
    manager = _manager(tmp_path, ModelControlMode.POLL, poll_s=0.1)
    await manager.start()
    try:
        make_python_identity(tmp_path, "late")
        for _ in range(100):  # bounded: up to 10 s on a loaded machine
            if manager.model_ready("late", None):
                break
            await asyncio.sleep(0.1)
        assert manager.model_ready("late", None)
    finally:
        await manager.stop()


async def test_index_lists_a_slow_repository_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_python_identity(tmp_path, "a")
    manager = _manager(tmp_path, ModelControlMode.EXPLICIT)
    await manager.start()
    from runtime.models import namespaces  # where the manager's listing is done

    listing, release = threading.Event(), threading.Event()
    listed_in: list[threading.Thread] = []

    def slow_listing(repo: Path) -> list[str]:  # a repository on a slow network volume
        listed_in.append(threading.current_thread())
        listing.set()
        release.wait(10)  # hangs until the test has seen the loop run meanwhile
        return list_models(repo)

    monkeypatch.setattr(namespaces, "list_models", slow_listing)
    index = asyncio.create_task(manager.index())
    assert await asyncio.to_thread(listing.wait, 10)  # the listing is under way...
    assert not index.done()  # ...and this line runs: the loop was not held by it
    release.set()
    assert await index == [{"name": "a"}]
    assert listed_in and listed_in[0] is not threading.main_thread()
    await manager.stop()


async def test_load_runs_off_the_event_loop(tmp_path: Path) -> None:
    # initialize() lasts until the test has seen the loop tick on (the hold file), not 0.5 s:
    # a loaded machine could give the loop fewer than 10 ticks in 0.5 s, though it ran.
    hold = tmp_path / "slow" / "hold"
    make_slow_init(tmp_path, "slow", delay_s=0.5, hold_file=hold)
    manager = _manager(tmp_path, ModelControlMode.EXPLICIT)
    await manager.start()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    hold.write_text(str(HUNG_AFTER_S))
    try:
        load = asyncio.create_task(manager.load("slow"))
        for _ in range(500):  # until the load has begun (bounded: 5 s)
            if (await _states(manager)).get("slow") == "LOADING":
                break
            await asyncio.sleep(0.01)
        assert (await _states(manager))["slow"] == "LOADING"
        begun = ticks
        await eventually(lambda: ticks >= begun + 10)
        assert not load.done()  # the loop kept running while initialize() waited
    finally:
        hold.unlink()
    await load
    task.cancel()
    assert manager.model_ready("slow", None)
    await manager.stop()


async def test_unload_finishes_queued_requests_then_refuses(tmp_path: Path) -> None:
    make_slow_execute(tmp_path, "slow", delay_s=0.05)
    manager = _manager(tmp_path, ModelControlMode.EXPLICIT, "slow")
    await manager.start()
    inflight = [asyncio.create_task(manager.infer(_identity_request("slow", i))) for i in range(4)]
    await asyncio.sleep(0.01)
    unloading = asyncio.create_task(manager.unload("slow"))
    await eventually(lambda: not manager.model_ready("slow", None))  # UNLOADING, or gone
    # Going (or gone): refused at once, in Triton's words and code for an unloaded model.
    with pytest.raises(ModelNotLoaded, match="has no available versions") as going:
        await manager.infer(_identity_request("slow"))
    assert going.value.status == 404
    await unloading
    results = await asyncio.gather(*inflight, return_exceptions=True)
    assert [r.outputs[0].data.tolist() for r in results if not isinstance(r, Exception)] == [
        [float(i)] for i in range(4)
    ]
    with pytest.raises(ModelNotLoaded):
        await manager.infer(_identity_request("slow"))
    await manager.stop()


async def test_onnx_model_serves_and_reports_metadata(tmp_path: Path) -> None:
    make_onnx_identity(tmp_path, "ident")
    manager = _manager(tmp_path, ModelControlMode.NONE)
    await manager.start()
    try:
        meta = manager.metadata("ident", None)
        assert meta["platform"] == "onnxruntime_onnx"
        assert meta["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, -1]}]
        data = np.arange(6, dtype=np.float32).reshape(2, 3)
        response = await manager.infer(
            InferRequest("ident", "1", [InferTensor("INPUT0", "FP32", (2, 3), data)])
        )
        np.testing.assert_array_equal(response.outputs[0].data, data)
        with pytest.raises(ModelNotFound, match="version 9"):
            await manager.infer(
                InferRequest("ident", "9", [InferTensor("INPUT0", "FP32", (2, 3), data)])
            )
    finally:
        await manager.stop()


async def test_version_policy_all_serves_each_version(tmp_path: Path) -> None:
    model_dir = make_python_identity(tmp_path, "multi")
    with (model_dir / "config.pbtxt").open("a") as f:
        f.write("version_policy: { all: {} }\n")
    (model_dir / "2").mkdir()
    (model_dir / "2" / "model.py").write_bytes((model_dir / "1" / "model.py").read_bytes())
    manager = _manager(tmp_path, ModelControlMode.NONE)
    await manager.start()
    try:
        assert manager.metadata("multi", None)["versions"] == ["1", "2"]
        assert [r.get("version") for r in await manager.index()] == ["1", "2"]
        for version in ("1", "2", ""):
            request = _identity_request("multi")
            request.model_version = version
            response = await manager.infer(request)
            assert response.model_version == (version or "2")  # unversioned -> latest
        stats = manager.statistics("multi", None)["model_stats"]
        assert {s["version"]: s["inference_count"] for s in stats} == {"1": 1, "2": 2}
        assert manager.statistics("multi", "1")["model_stats"][0]["inference_count"] == 1
    finally:
        await manager.stop()


async def test_instances_are_the_backends_serving_a_version_while_it_is_loaded(
    tmp_path: Path,
) -> None:
    model = make_onnx_identity(tmp_path, "ident")
    with (model / "config.pbtxt").open("a") as f:
        f.write("instance_group [ { kind: KIND_CPU count: 2 } ]\n")
    manager = _manager(tmp_path, ModelControlMode.EXPLICIT, "ident")
    await manager.start()
    try:
        instances = manager.instances("ident")
        assert len(instances) == 2 and manager.instances("ident", "1") == instances
        with pytest.raises(ModelNotFound):
            manager.instances("ident", "7")
        await manager.unload("ident")
        with pytest.raises(ModelNotLoaded):  # refused as a request for it would be
            manager.instances("ident")
    finally:
        await manager.stop()
