"""Triton's load state of each model in explicit model control, through `thaw up`: pure.

    NOT_LOADED  at start, unless `--load-model` names it (`*`: every model): refused, nothing
                wakes (`model 'm' is not ready`, 503 / UNAVAILABLE)
    LOADED      a load call read its files (an ensemble's steps with it); ready at zero too:
                a request wakes it, and it scales to zero when idle, as in the other modes
    UNLOADED    an unload call: refused at once (`Request for unknown model: 'm' has no
                available versions`, 404 / NOT_FOUND) while its replicas drain; an ensemble
                an unload of one of its steps took down is UNLOADED *down with a step*: it
                is loaded again once its steps are (tritonconfig.back_with_steps)

Each model also has whether it was loaded by name (a load call, `--load-model`), Triton's
"explicitly loaded": an unload with `unload_dependents` never takes such a model with the
ensemble that runs it (tritonconfig.unload_plan).

In the other modes (`none`, `poll`), and with a scaler of several activators that does not
share the state, every model is LOADED. With `--scaler kubernetes` the fleet's activators share
it (activator.scaler.backend.SharedLoadState: a Lease of the fleet), and this table is this
activator's copy, kept up to date by activator.fleet.load_calls
(docs/decisions/0024-explicit-mode-load-state-through-thaw-up.md).
The refusals are `thaw serve`'s words (thawwire.model_control), so both servers answer alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from activator.errors import ActivatorError, ModelUnavailable, UnknownModel
from thawserver.repository_flags import ALL_MODELS
from thawwire.model_control import no_available_versions, not_ready

__all__ = ["LoadState", "LoadStates"]


class LoadState(StrEnum):
    """Where one model stands with the load/unload API."""

    NOT_LOADED = "not loaded"
    LOADED = "loaded"
    UNLOADED = "unloaded"


class LoadStates:
    """Each model's LoadState. `tracked` False: every model is LOADED, always (not explicit
    mode, or no state shared between activators); `at_start`: the models loaded at start
    (`--load-model` names; `*` is every model)."""

    def __init__(self, *, tracked: bool, at_start: Iterable[str] = ()) -> None:
        self._tracked = tracked
        names = set(at_start)
        self._all_at_start = ALL_MODELS in names
        self._states = {n: LoadState.LOADED for n in names - {ALL_MODELS}}
        self._named = dict.fromkeys(names - {ALL_MODELS}, True)  # else: `_all_at_start`
        self._down: set[str] = set()  # UNLOADED ensembles down with a step

    @property
    def tracked(self) -> bool:
        """Whether models can be other than LOADED (explicit mode, one activator's state)."""
        return self._tracked

    def state(self, name: str) -> LoadState:
        if not self._tracked:
            return LoadState.LOADED
        default = LoadState.LOADED if self._all_at_start else LoadState.NOT_LOADED
        return self._states.get(name, default)

    def loaded(self, name: str) -> bool:
        return self.state(name) is LoadState.LOADED

    def refusal(self, name: str) -> ActivatorError | None:
        """The error a request for `name` gets when it is not loaded (None: it is)."""
        state = self.state(name)
        if state is LoadState.NOT_LOADED:
            return ModelUnavailable(not_ready(name))
        if state is LoadState.UNLOADED:
            return UnknownModel(no_available_versions(name))
        return None

    def named(self, name: str) -> bool:
        """Whether `name` was loaded by name (and not unloaded since, but down with a step)."""
        return self._named.get(name, self._all_at_start)

    def down_with_a_step(self) -> set[str]:
        """The ensembles down with a step, to be loaded again once their steps are."""
        return set(self._down)

    def mark_loaded(self, *names: str) -> None:
        """A load call read these models' files (an ensemble and its steps)."""
        self._states.update(dict.fromkeys(names, LoadState.LOADED))
        self._down.difference_update(names)

    def mark_named(self, name: str) -> None:
        """A load call named `name`."""
        self._named[name] = True

    def mark_unloaded(self, name: str, *, with_a_step: bool = False) -> None:
        """An unload call (of it, or of an ensemble it was a dependent of): refused from now
        on, until loaded again. `with_a_step`: an ensemble an unload of one of its steps took
        down, refused the same, which keeps its name mark and comes back with the step."""
        self._states[name] = LoadState.UNLOADED
        if with_a_step:
            self._down.add(name)
        else:
            self._named[name] = False
            self._down.discard(name)
