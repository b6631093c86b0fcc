"""`thaw up --model-namespacing=true`: which model a name means when several repositories hold
it (activator.fleet.repository), and how the fleet follows a name's holders as they change
(activator.fleet.reload), in front of a fake scaler backend and a tiny upstream replica.

Repository `a` holds `shared`, `only_a` and the ensemble `ens_a` stepping into `shared`;
`b` holds another `shared` and `ens_b` stepping into it."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from activator.config import ActivatorConfig, ScaleSettings
from activator.errors import AmbiguousModel, ModelUnavailable
from activator.fleet.fleet import Fleet
from activator.fleet.repository import Repository
from activator.surfaces.app import FLEET, build_app
from tests.fakes.scaler_backend import FakeScalerBackend
from tests.fakes.upstream import start_upstream
from tests.fixtures.config_only_models import ENSEMBLE_CONFIG, STEP_CONFIG, write_model

AMBIGUITY = (
    "There are 2 identifiers of model 'shared' in global map, model namespace must be provided "
    "to resolve ambiguity."
)


def _repos(root: Path) -> tuple[Path, Path]:
    a, b = root / "a", root / "b"
    for repo, ensemble in ((a, "ens_a"), (b, "ens_b")):
        write_model(repo, "shared", STEP_CONFIG.format(name="shared"))
        write_model(repo, ensemble, ENSEMBLE_CONFIG.format(name=ensemble, step="shared"))
    write_model(a, "only_a", STEP_CONFIG.format(name="only_a"))
    return a, b


def _scan(*roots: Path, namespacing: bool = True) -> Repository:
    return Repository.scan(list(roots), ScaleSettings(), namespacing=namespacing)


# -- which model a name means (pure over the disk) ---------------------------------------------


def test_a_name_several_namespaces_hold_is_refused_with_tritons_words(tmp_path: Path) -> None:
    repository = _scan(*_repos(tmp_path))
    assert repository.names() == ["ens_a", "ens_b", "only_a"]
    assert repository.unavailable == {}
    with pytest.raises(AmbiguousModel) as refused:
        repository.get("shared")
    assert (refused.value.status, refused.value.message) == (400, AMBIGUITY)


def test_without_namespacing_a_name_in_two_repositories_stays_unavailable(tmp_path: Path) -> None:
    repository = _scan(*_repos(tmp_path), namespacing=False)
    assert "shared" in repository.unavailable
    with pytest.raises(ModelUnavailable):
        repository.get("shared")
    # ... and so the ensembles stepping on it
    assert repository.names() == ["only_a"]


def test_an_ensemble_steps_on_its_own_namespaces_model(tmp_path: Path) -> None:
    a, b = _repos(tmp_path)
    c = tmp_path / "c"  # a third namespace, without `shared` of its own
    write_model(c, "ens_c", ENSEMBLE_CONFIG.format(name="ens_c", step="shared"))
    repository = _scan(a, b, c)
    assert {"ens_a", "ens_b"} <= set(repository.names())
    assert repository.unavailable == {"ens_c": f"ensemble 'ens_c' depends on 'shared': {AMBIGUITY}"}
    assert repository.stepping_on("shared") == ["ens_a", "ens_b"]


def test_a_namespaced_ensembles_replica_takes_no_direct_connections(tmp_path: Path) -> None:
    # It loads its step models itself: they must not answer a client by name.
    repository = _scan(*_repos(tmp_path))
    assert not repository.get("ens_a").settings.direct_connections
    assert repository.get("only_a").settings.direct_connections


def test_a_reread_says_when_a_name_is_held_twice(tmp_path: Path) -> None:
    a, b = _repos(tmp_path)
    repository = _scan(a, b)
    assert repository.reread("shared").ambiguous == (a / "shared", b / "shared")
    assert "shared" in repository.fingerprints()  # so a poll sees it change
    shutil.rmtree(b / "shared")
    reread = repository.reread("shared")
    assert (reread.ambiguous, reread.entry is not None) == ((), True)


# -- the fleet follows a name's holders ----------------------------------------------------


@pytest.fixture
async def up(tmp_path: Path) -> AsyncIterator[tuple[str, FakeScalerBackend, Fleet, Path, Path]]:
    a, b = _repos(tmp_path)
    async with _served(a, b, load_models=("*",)) as (url, backend, fleet):
        yield url, backend, fleet, a, b


@contextlib.asynccontextmanager
async def _served(
    a: Path, b: Path, *, load_models: tuple[str, ...] = ()
) -> AsyncIterator[tuple[str, FakeScalerBackend, Fleet]]:
    """`thaw up`'s app over namespaced repositories `a` and `b` (explicit mode: `load_models`
    loaded at start), a fake backend and upstream; its url, backend and fleet."""
    upstream = await start_upstream()
    config = ActivatorConfig(
        model_control=True, load_models=load_models, repository=a, more_repositories=(b,),
        model_namespacing=True, build_images=False,
    )  # fmt: skip
    backend = FakeScalerBackend(
        url=str(upstream.make_url("")).rstrip("/"), open_gate=True, claim_s=0.0, restore_s=0.01
    )
    app = build_app(config, backend=backend)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/"), backend, app[FLEET]
    finally:
        await server.close()
        await upstream.close()


async def _post(url: str, path: str) -> tuple[int, Any]:
    body = b"x" if path.endswith("/infer") else None  # the fake upstream answers any body
    async with aiohttp.ClientSession() as s, s.post(f"{url}{path}", data=body) as r:
        text = await r.text()
        return r.status, (await r.json(content_type=None)) if r.status != 200 and text else None


async def test_the_shared_name_is_refused_and_the_unique_one_served(up: Any) -> None:
    url, backend, _, _, _ = up
    assert await _post(url, "/v2/models/shared/infer") == (400, {"error": AMBIGUITY})
    assert (await _post(url, "/v2/models/only_a/infer"))[0] == 200
    assert backend.starts == 1  # woken from zero for the request


async def test_a_load_of_the_shared_name_is_taken_and_warms_nothing(up: Any) -> None:
    url, backend, _, _, _ = up
    assert await _post(url, "/v2/repository/models/shared/load") == (200, None)
    assert backend.starts == 0


async def test_the_poll_serves_a_name_held_once_more_and_renews_the_ensembles(up: Any) -> None:
    url, backend, fleet, _, b = up
    for ensemble in ("ens_a", "ens_b"):
        assert await _post(url, f"/v2/repository/models/{ensemble}/load") == (200, None)
    assert backend.starts == 2
    shutil.move(b / "shared", b.parent / "shared")
    await fleet.reloader.poll()
    assert fleet.served("shared")  # one namespace holds it: served by name, at zero
    # Their replicas loaded the step as it was resolved then: replaced, to resolve it again.
    assert sorted(backend.stopped) == ["ens_a-1", "ens_b-2"]
    shutil.move(b.parent / "shared", b / "shared")
    await fleet.reloader.poll()
    assert not fleet.served("shared")
    assert await _post(url, "/v2/models/shared/infer") == (400, {"error": AMBIGUITY})


async def test_a_load_of_an_ensemble_rereads_its_steps_first(up: Any) -> None:
    url, backend, fleet, _, b = up
    assert await _post(url, "/v2/repository/models/ens_a/load") == (200, None)
    shutil.move(b / "shared", b.parent / "shared")
    assert await _post(url, "/v2/repository/models/ens_a/load") == (200, None)
    assert fleet.served("shared")  # as Triton's load cascades to an ensemble's steps
    assert backend.stopped == ["ens_a-1"]  # its replica replaced, then warmed again
    assert backend.starts == 2


async def test_an_ensemble_asked_wakes_no_step_model_of_its_own(up: Any) -> None:
    # Its replica runs its steps: waking the step's own endpoint too would be a wasted replica.
    url, backend, fleet, a, _ = up
    write_model(a, "ens_only", ENSEMBLE_CONFIG.format(name="ens_only", step="only_a"))
    assert await _post(url, "/v2/repository/models/ens_only/load") == (200, None)
    assert (await _post(url, "/v2/models/ens_only/infer"))[0] == 200
    assert backend.starts == 1
    assert fleet.endpoint("only_a").ready_count == 0


async def test_a_load_of_a_name_several_namespaces_hold_loads_each_ones_steps(
    tmp_path: Path,
) -> None:
    # Explicit mode, nothing loaded at start: Triton's load of `ens` cascades to the steps of
    # every namespace's `ens` (qa/L0_model_namespacing's test_ensemble_duplication).
    a, b = tmp_path / "a", tmp_path / "b"
    for repo, step in ((a, "step_a"), (b, "step_b")):
        write_model(repo, step, STEP_CONFIG.format(name=step))
        write_model(repo, "ens", ENSEMBLE_CONFIG.format(name="ens", step=step))
    write_model(a, "other", STEP_CONFIG.format(name="other"))
    async with _served(a, b) as (url, _, fleet):
        assert (await _post(url, "/v2/models/step_a/infer"))[0] == 503  # not loaded yet
        assert await _post(url, "/v2/repository/models/ens/load") == (200, None)
        assert [fleet.load_states.loaded(n) for n in ("step_a", "step_b", "other")] == [
            True, True, False,
        ]  # fmt: skip
        assert (await _post(url, "/v2/models/step_a/infer"))[0] == 200
