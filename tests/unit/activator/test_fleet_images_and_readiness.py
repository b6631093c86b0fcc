"""The fleet's image states (one vocabulary; an ensemble has no image) and `thaw up`'s
readiness (held back by a local warm pool still making its first process, never by pods)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from activator.config import ActivatorConfig, ScaleSettings
from activator.fleet.fleet import Fleet
from activator.fleet.repository import Repository
from activator.observe.metrics import Metrics
from activator.observe.status_document import ImageState
from activator.scaler.backend import PoolStatus
from activator.surfaces.app import build_app
from tests.fakes.scaler_backend import FakeScalerBackend
from tests.fixtures.config_only_models import ENSEMBLE_CONFIG, STEP_CONFIG, write_model


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    write_model(root, "leaf", STEP_CONFIG.format(name="leaf"))
    write_model(root, "pipeline", ENSEMBLE_CONFIG.format(name="pipeline", step="leaf"))
    return root


@pytest.mark.parametrize(
    ("build", "leaf"), [(True, ImageState.QUEUED), (False, ImageState.UNKNOWN)]
)
async def test_an_ensemble_has_no_image_job_and_says_so(
    repo: Path, tmp_path: Path, build: bool, leaf: ImageState
) -> None:
    config = ActivatorConfig(repository=repo, cache_dir=tmp_path / "cache", build_images=build)
    async with aiohttp.ClientSession() as session:
        fleet = Fleet(config, Repository.scan(repo, ScaleSettings()), Metrics(), session,
                      backend=FakeScalerBackend(open_gate=True))  # fmt: skip
        # Not started: the jobs have not run, the states are what `thaw status` shows first.
        assert fleet.image_states == {"leaf": leaf, "pipeline": ImageState.NO_WEIGHTS}
        assert fleet.status().image_builds == fleet.image_states
        if build:
            assert fleet.images is not None and set(fleet.images.states) == {"leaf"}
        await fleet.close()


@pytest.mark.parametrize(
    ("pool", "status"),
    [
        (PoolStatus(size=1, ready=0, source="fork-server"), 503),  # first process not made
        (PoolStatus(size=1, ready=1, source="fork-server"), 200),
        (PoolStatus(size=1, ready=0, source="spawn", starts=1), 200),  # made one, claimed
        (PoolStatus(size=1, ready=0, source="spawn", failures=2), 200),  # waiting helps nobody
        (PoolStatus(size=0, ready=0, source="spawn"), 200),  # keeps none
        (PoolStatus(size=2, ready=0), 200),  # pods: the cluster brings them, not this process
    ],
)
async def test_readiness_waits_only_for_a_local_pools_first_process(
    repo: Path, pool: PoolStatus, status: int
) -> None:
    backend = FakeScalerBackend(open_gate=True)
    backend.pool = pool
    config = ActivatorConfig(repository=repo, build_images=False)
    server = TestServer(build_app(config, backend=backend), host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as s, s.get(server.make_url("/v2/health/ready")) as r:
            assert r.status == status
    finally:
        await server.close()


async def test_a_model_added_after_the_start_gets_an_image_job(repo: Path, tmp_path: Path) -> None:
    config = ActivatorConfig(repository=repo, cache_dir=tmp_path / "cache", build_images=True)
    async with aiohttp.ClientSession() as session:
        fleet = Fleet(config, Repository.scan(repo, ScaleSettings()), Metrics(), session,
                      backend=FakeScalerBackend(open_gate=True))  # fmt: skip
        write_model(repo, "late", STEP_CONFIG.format(name="late"))
        reread = await asyncio.to_thread(fleet.repository.reread, "late")
        assert reread.entry is not None and reread.fingerprint is not None
        fleet.add_model(reread.entry, reread.fingerprint)
        # Queued beside the start-up's job (the jobs run once the loop gets to them).
        assert fleet.image_states["late"] == ImageState.QUEUED
        assert fleet.image_states["leaf"] == ImageState.QUEUED
        assert fleet.endpoint("late").ready_count == 0  # at zero
        await fleet.close()  # the job is cancelled
