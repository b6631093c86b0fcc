"""Ensembles behind `thaw up`: one that cannot run is unavailable with a replica's reason; one
that is asked wakes every model its steps run, at once (nested ensembles included)."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from activator.config import ActivatorConfig, ScaleSettings
from activator.fleet.fleet import Fleet
from activator.fleet.repository import Repository
from activator.observe.metrics import Metrics
from tests.fakes.loop import settle
from tests.fakes.scaler_backend import FakeScalerBackend

MODEL = """
name: "{name}" backend: "python" max_batch_size: 4
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }} ]
"""
ENSEMBLE = """
name: "{name}" platform: "ensemble" max_batch_size: 4
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }} ]
ensemble_scheduling {{ step [ {{ model_name: "{step}" model_version: -1
  input_map {{ key: "X" value: "X" }} output_map {{ key: "Y" value: "Y" }} }} ] }}
"""


def _write(repo: Path, name: str, text: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    if "backend" in text:
        (repo / name / "1" / "model.py").write_text("")
    (repo / name / "config.pbtxt").write_text(text)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    _write(tmp_path, "leaf", MODEL.format(name="leaf"))
    _write(tmp_path, "inner", ENSEMBLE.format(name="inner", step="leaf"))
    _write(tmp_path, "outer", ENSEMBLE.format(name="outer", step="inner"))
    _write(tmp_path, "dangling", ENSEMBLE.format(name="dangling", step="nope"))
    _write(tmp_path, "on_dangling", ENSEMBLE.format(name="on_dangling", step="dangling"))
    _write(tmp_path, "ping", ENSEMBLE.format(name="ping", step="pong"))
    _write(tmp_path, "pong", ENSEMBLE.format(name="pong", step="ping"))
    on_v2 = ENSEMBLE.format(name="on_v2", step="leaf").replace(
        "model_version: -1", "model_version: 2"
    )
    _write(tmp_path, "on_v2", on_v2)
    return tmp_path


def test_ensembles_that_cannot_run_are_unavailable_with_the_reason(repo: Path) -> None:
    repository = Repository.scan(repo, ScaleSettings())
    assert repository.names() == ["inner", "leaf", "outer"]
    why = repository.unavailable
    assert "depends on 'nope' which is not in the model repository" in why["dangling"]
    assert "depends on 'dangling' which has no loaded version" in why["on_dangling"]
    assert "circular dependency between ensembles: ping -> ... -> pong -> ping" in why["ping"]
    # leaf serves version 1 only: a replica's words for a step's required version
    assert (
        why["on_v2"] == "ensemble 'on_v2' depends on 'leaf' whose required version 2 is not loaded."
    )


async def test_asking_an_ensemble_wakes_the_models_of_its_steps(repo: Path) -> None:
    config = ActivatorConfig(repository=repo, build_images=False)
    backend = FakeScalerBackend(open_gate=True)
    async with aiohttp.ClientSession() as session:
        fleet = Fleet(config, Repository.scan(repo, ScaleSettings()), Metrics(), session,
                      backend=backend)  # fmt: skip
        assert fleet.models["outer"].composing == ("inner", "leaf")
        fleet.wake_composing("outer")
        ready = lambda: {e.name for e in fleet.endpoints.values() if e.ready_count}  # noqa: E731
        await settle(lambda: ready() == {"inner", "leaf"})
        assert backend.starts == 2  # "outer" itself was not asked here
        fleet.wake_composing("leaf")  # a plain model: nothing else to wake
        assert backend.starts == 2
        await fleet.close()
