"""The load and unload calls with a shared load state (activator.fleet.load_calls with a
SharedLoadState backend, decision 0024 "Kubernetes, later"): the fleet's state is written
first; a write that fails answers 503 and changes nothing here; what another activator did is
adopted (a load brings min_replicas up, an unload refuses and drains here too)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from activator.errors import ScalerUnavailable, UnknownModel
from activator.fleet.load_calls import LoadCalls
from activator.fleet.load_state import LoadState, LoadStates
from activator.scaler.backend import SharedLoadState


class _Endpoint:
    def __init__(self) -> None:
        self.pokes = 0

    def poke(self) -> None:
        self.pokes += 1

    def directly_connected(self) -> list[Any]:
        return []


@dataclass
class _Record:
    endpoint: _Endpoint = field(default_factory=_Endpoint)
    composing: tuple[str, ...] = ()


class _Reloader:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def load(self, name: str, override: object = None, *, wait: bool = True) -> None:
        self.calls.append(("load", name))

    async def unload(self, name: str, refusal: Exception | None = None) -> None:
        self.calls.append(("unload", name))


class _Repository:
    ambiguous: Mapping[str, Any] = {}

    def __init__(self, models: Mapping[str, _Record]) -> None:
        self._models = models

    def get(self, name: str) -> Any:
        return type("_Entry", (), {"steps": self._models[name].composing})()


class _Shared:
    """The fleet's shared state, as a backend keeps it (in memory here)."""

    def __init__(self) -> None:
        self.states: dict[str, str] = {}
        self.watchers: list[Callable[[Mapping[str, str]], None]] = []
        self.fail = False
        self.unread: dict[str, str] = {}  # another activator's writes, not read here yet
        self.refreshes = 0

    def share_load_state(self, changed: Callable[[Mapping[str, str]], None]) -> None:
        self.watchers.append(changed)

    def load_states(self) -> Mapping[str, str]:
        return self.states

    async def write_load_states(self, changes: Mapping[str, str]) -> None:
        if self.fail:
            raise ScalerUnavailable("the fleet's load state could not be written")
        self.states.update(changes)

    async def refresh_load_states(self) -> None:
        self.refreshes += 1
        unread, self.unread = self.unread, {}
        if unread:
            self.another_activator(unread)

    def another_activator(self, changes: Mapping[str, str]) -> None:
        self.states.update(changes)
        for watcher in self.watchers:
            watcher(changes)


def _calls(
    shared: _Shared, *, models: Mapping[str, _Record]
) -> tuple[LoadCalls, LoadStates, _Reloader]:
    states = LoadStates(tracked=True)
    reloader = _Reloader()
    calls = LoadCalls(
        models=models, repository=cast(Any, _Repository(models)), states=states,
        reloader=cast(Any, reloader), session=cast(Any, None), drain_timeout_s=1.0,
        shared=shared,
    )  # fmt: skip
    return calls, states, reloader


def test_the_in_memory_store_fits_the_seam() -> None:
    assert isinstance(_Shared(), SharedLoadState)


async def test_a_load_and_an_unload_write_the_fleets_state_first() -> None:
    shared = _Shared()
    models = {"e": _Record(composing=("s",)), "s": _Record()}
    calls, states, reloader = _calls(shared, models=models)
    await calls.load("e")
    # the ensemble by name, its steps with it
    assert shared.states == {"e": "named", "s": "loaded"}
    assert states.loaded("e") and states.loaded("s")
    assert models["s"].endpoint.pokes == 1
    await calls.unload("e")
    assert shared.states["e"] == "unloaded"
    assert isinstance(states.refusal("e"), UnknownModel)
    assert reloader.calls == [("load", "e"), ("unload", "e")]


async def test_a_write_that_fails_answers_503_and_changes_nothing_here() -> None:
    shared = _Shared()
    models = {"m": _Record()}
    calls, states, reloader = _calls(shared, models=models)
    await calls.load("m")
    shared.fail = True
    with pytest.raises(ScalerUnavailable) as refused:
        await calls.unload("m")
    assert refused.value.status == 503
    assert states.loaded("m")  # still served, not drained
    assert reloader.calls == [("load", "m")]
    with pytest.raises(ScalerUnavailable):
        await calls.load("n")
    assert states.state("n") is LoadState.NOT_LOADED


async def test_another_activators_load_and_unload_are_adopted() -> None:
    shared = _Shared()
    models = {"m": _Record()}
    calls, states, reloader = _calls(shared, models=models)
    shared.another_activator({"m": "loaded"})
    assert states.loaded("m") and models["m"].endpoint.pokes == 1
    shared.another_activator({"m": "unloaded", "gone": "unloaded"})
    assert states.state("m") is LoadState.UNLOADED
    await asyncio.sleep(0)  # the drain runs as a task
    await asyncio.sleep(0)
    assert reloader.calls == [("unload", "m")]  # drained here too; "gone" is not served here
    await calls.close()


async def test_a_request_for_a_model_not_loaded_here_reads_the_fleets_state_first() -> None:
    # A client loads `m` through another activator, whose answer came before this one's
    # next periodic read; its next request comes here.
    shared = _Shared()
    models = {"m": _Record(), "n": _Record()}
    calls, states, _ = _calls(shared, models=models)
    shared.unread = {"m": "named"}
    assert calls.stale("m") and not calls.stale("unknown")
    await calls.refresh("m")
    assert states.loaded("m") and states.named("m") and shared.refreshes == 1
    await calls.refresh("m")  # loaded here: nothing to learn
    await calls.refresh("unknown")  # not a model of the repository: no read for it
    assert shared.refreshes == 1
    await calls.refresh("n")  # loaded by no activator: read, and still not loaded
    assert shared.refreshes == 2 and not states.loaded("n")
    shared.unread = {"n": "loaded"}
    await calls.refresh("m", "n", "unknown")  # the index: one read for them all
    assert shared.refreshes == 3 and states.loaded("n")
    await calls.refresh("m", "n")  # every one loaded here: nothing to learn
    assert shared.refreshes == 3


async def test_without_a_shared_state_a_request_reads_nothing() -> None:
    shared = _Shared()
    calls = LoadCalls(
        models={"m": _Record()}, repository=cast(Any, _Repository({})),
        states=LoadStates(tracked=False), reloader=cast(Any, _Reloader()),
        session=cast(Any, None), drain_timeout_s=1.0, shared=shared,
    )  # fmt: skip
    await calls.refresh("m")
    assert shared.refreshes == 0 and not calls.stale("m")


def test_without_explicit_mode_nothing_is_shared() -> None:
    shared = _Shared()
    LoadCalls(
        models={}, repository=cast(Any, _Repository({})), states=LoadStates(tracked=False),
        reloader=cast(Any, _Reloader()), session=cast(Any, None), drain_timeout_s=1.0,
        shared=shared,
    )  # fmt: skip
    assert shared.watchers == []


async def test_an_ensemble_down_with_its_step_comes_back_with_it_on_every_activator() -> None:
    # Triton 2.51: unloading a step takes its ensembles down; loading it again brings them
    # back. The fleet's state says "down" for them, so the activator that loads the step
    # brings them back, whichever took them down.
    shared = _Shared()
    models = {"e": _Record(composing=("s",)), "s": _Record()}
    calls, states, _ = _calls(shared, models=models)
    await calls.load("e")
    await calls.unload("s")
    assert shared.states == {"e": "down", "s": "unloaded"}
    assert isinstance(states.refusal("e"), UnknownModel)  # refused as unloaded
    await calls.load("s")
    # back, still loaded by name (down with a step keeps the mark)
    assert shared.states == {"e": "named", "s": "named"} and states.loaded("e")
    # another activator took it down: adopted, and brought back by a load here
    shared.another_activator({"e": "down", "s": "unloaded"})
    assert states.state("e") is LoadState.UNLOADED and states.down_with_a_step() == {"e"}
    await calls.load("s")
    assert states.loaded("e") and shared.states["e"] == "named"
    # unloaded by name: it stays down when its step comes back
    await calls.unload("e")
    await calls.unload("s")
    await calls.load("s")
    assert not states.loaded("e")


async def test_unload_dependents_keeps_what_was_loaded_by_name() -> None:
    shared = _Shared()
    models = {"e": _Record(composing=("a", "b")), "a": _Record(), "b": _Record()}
    calls, states, _ = _calls(shared, models=models)
    await calls.load("e")
    await calls.load("a")
    await calls.unload("e", unload_dependents=True)
    assert states.loaded("a") and not states.loaded("b")  # b came with e alone


async def test_a_load_by_name_on_another_activator_keeps_the_model_from_unload_dependents() -> None:
    # Triton's "explicitly loaded" is the fleet's: the activator that serves the unload of an
    # ensemble with `unload_dependents` keeps the step another activator's load call named.
    shared = _Shared()
    models = {"e": _Record(composing=("a", "b")), "a": _Record(), "b": _Record()}
    calls, states, _ = _calls(shared, models=models)
    await calls.load("e")
    shared.another_activator({"a": "named"})  # a load call of `a` on another activator
    assert states.named("a") and not states.named("b")
    await calls.unload("e", unload_dependents=True)
    assert states.loaded("a") and not states.loaded("b")
    assert shared.states == {"e": "unloaded", "a": "named", "b": "unloaded"}
    # a step's load elsewhere ("loaded") takes no mark away; an unload does
    shared.another_activator({"a": "loaded"})
    assert states.named("a")
    shared.another_activator({"a": "unloaded"})
    assert not states.named("a")
    await calls.close()
