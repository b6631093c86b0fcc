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
from tests.fixtures.config_only_models import ENSEMBLE_CONFIG, STEP_CONFIG, write_model


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    write_model(tmp_path, "leaf", STEP_CONFIG.format(name="leaf"))
    steps = {"inner": "leaf", "outer": "inner", "dangling": "nope", "on_dangling": "dangling",
             "ping": "pong", "pong": "ping"}  # fmt: skip
    for name, step in steps.items():
        write_model(tmp_path, name, ENSEMBLE_CONFIG.format(name=name, step=step))
    on_v2 = ENSEMBLE_CONFIG.format(name="on_v2", step="leaf").replace(
        "model_version: -1", "model_version: 2"
    )
    write_model(tmp_path, "on_v2", on_v2)
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
