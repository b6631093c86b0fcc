"""The repository load and unload calls, as they change the fleet: what Triton's load/unload API
does to the models of one `thaw up` (its load state: activator.fleet.load_state).

    load(name, override)   re-read `name` and warm it (activator.fleet.reload); then LOADED,
                           with every model its ensemble's steps run (a name several namespaces
                           hold: each one's steps), even when the warm-up failed (unavailable
                           then, with why, as a Triton model whose load failed); their
                           `min_replicas` come up at once, not at the next tick
    unload(name)           a served model: UNLOADED (refused from now on); in explicit mode its
                           replicas holding handed-off client connections are told to unload it
                           first; then drained to zero (activator.fleet.reload). The ensembles
                           that run it go down with it, and come back once it (every model
                           their steps run) is loaded again, as in Triton
                           (tritonconfig.unload_plan, back_with_steps)

    adopt(changes)         another activator's load or unload (a backend that shares the
                           state: activator.scaler.backend.SharedLoadState): LOADED with its
                           `min_replicas` up ("named": and loaded by name), or UNLOADED
                           ("down": down with a step) and drained here too

In explicit mode (`--model-control-mode explicit`) the states are tracked; in the other modes
every model stays LOADED, and the calls only re-read and warm, or drain
(docs/decisions/0024-explicit-mode-load-state-through-thaw-up.md). With a shared state the
change is written there first (a load: once its files are read; an unload: before anything
else): a write that fails answers 503 (`ScalerUnavailable`) and changes nothing here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping
from typing import Protocol

import aiohttp

from activator.endpoint.model_endpoint import ModelEndpoint
from activator.endpoint.replica import Replica
from activator.errors import ActivationFailed, ActivatorError, BadRequest, UnknownModel
from activator.fleet.load_state import LoadStates
from activator.fleet.reload import Reloader
from activator.fleet.repository import Repository, ambiguous_steps
from activator.scaler.backend import SharedLoadState
from activator.scaler.runtime_control import RuntimeControl
from thawwire.load_overrides import LoadOverride
from thawwire.model_control import LOAD_FAILED_WORDS, unload_not_in_repository
from thawwire.names import is_model_name
from tritonconfig import back_with_steps, unload_plan

__all__ = ["DOWN", "LOADED", "NAMED", "LoadCalls", "LoadedModel"]

# The fleet's shared states (activator.scaler.kubernetes.load_state_doc): a model loaded (as
# an ensemble's step, or brought back with its steps); loaded by name (a load call named it:
# Triton's "explicitly loaded", which `unload_dependents` never takes); an ensemble down with
# a step (unloaded; back with its steps). "unloaded" is the fourth.
LOADED = "loaded"
NAMED = "named"
DOWN = "down"

logger = logging.getLogger(__name__)


class LoadedModel(Protocol):
    """What the load calls read of one served model's record (activator.fleet.fleet.FleetModel)."""

    @property
    def endpoint(self) -> ModelEndpoint: ...

    @property
    def composing(self) -> tuple[str, ...]:
        """Every model its ensemble's steps run, nested ensembles expanded (() for a model)."""
        ...


class LoadCalls:
    """The load and unload calls of one fleet (module docstring). `models`: the fleet's records
    by name, kept up to date as models come and go; `drain_timeout_s`: how long a replica is
    given to answer the unload of a model it serves handed-off connections for; `shared`:
    where the fleet's activators share the state (None: this activator's memory only)."""

    def __init__(
        self,
        *,
        models: Mapping[str, LoadedModel],
        repository: Repository,
        states: LoadStates,
        reloader: Reloader,
        session: aiohttp.ClientSession,
        drain_timeout_s: float,
        shared: SharedLoadState | None = None,
    ) -> None:
        self._models = models
        self._repository = repository
        self._states = states
        self._reloader = reloader
        self._session = session
        self._drain_timeout_s = drain_timeout_s
        self._shared = shared if states.tracked else None
        # drains left running: unloads learned from other activators, or not waited for
        self._drains: set[asyncio.Task[None]] = set()
        if self._shared is not None:
            self._shared.share_load_state(self.adopt)

    async def load(
        self, name: str, override: LoadOverride | None = None, *, wait: bool = True
    ) -> None:
        """The repository load call: re-read `name` and warm it (activator.fleet.reload); it
        is loaded, with its ensemble's steps, once its files were read, even when the warm-up
        fails (then unavailable with why, as a Triton model whose load failed). Without
        `wait` the replicas it replaces stop after the return (a call a replica carried)."""
        try:
            await self._reloader.load(name, override, wait=wait)
        except ActivationFailed as exc:
            await self._loaded_by_name(name)
            if exc.refusal.startswith(LOAD_FAILED_WORDS):
                # A replica read the model and refused it: its answer, as tritonserver's (a
                # 400: `load failed for model 'm': version 1 is at UNAVAILABLE state: ...`).
                raise BadRequest(exc.refusal) from None
            raise
        await self._loaded_by_name(name)

    async def _loaded_by_name(self, name: str) -> None:
        await self._mark_loaded(name, by_name=True)
        await self._bring_back()

    async def _bring_back(self) -> None:
        """Load again the ensembles an unload of a step took down whose steps are all loaded
        now (tritonconfig.back_with_steps): loaded, at zero until a request wakes them."""
        down = {m: self._steps(m) for m in self._states.down_with_a_step() if m in self._models}
        if not down:
            return
        up = {model for model in self._models if self._states.loaded(model)}
        for model in back_with_steps(up, down):
            logger.info("model=%s loaded again: every model its steps run is loaded", model)
            await self._mark_loaded(model)

    def _steps(self, name: str) -> tuple[str, ...]:
        """The models ensemble `name`'s steps run (each once; () for any other model)."""
        try:
            return self._repository.get(name).steps
        except ActivatorError:
            return ()

    async def _mark_loaded(self, name: str, *, by_name: bool = False) -> None:
        """`name` (`by_name`: a load call named it) and every model its steps run; a name
        several namespaces hold (no record of its own) loads each one's ensemble's steps, as
        Triton's load cascades. The fleet's document says NAMED for a model loaded by name,
        now or before (its step loads keep the mark), LOADED for the others."""
        names: dict[str, None] = {}
        pending = [name]
        while pending:
            model = pending.pop()
            if model in names:
                continue
            record = self._models.get(model)
            if record is not None:
                names[model] = None
                names.update(dict.fromkeys(record.composing))
            elif model in self._repository.ambiguous:
                names[model] = None
                directories = self._repository.ambiguous[model]
                pending += await asyncio.to_thread(
                    ambiguous_steps, directories, self._repository.config_name
                )
        named = {m for m in names if (by_name and m == name) or self._states.named(m)}
        if self._shared is not None:  # the fleet's first (503 when it cannot be written)
            await self._shared.write_load_states(
                {m: NAMED if m in named else LOADED for m in names}
            )
        self._mark_loaded_here(names, named)

    def _mark_loaded_here(self, names: Iterable[str], named: Iterable[str] = ()) -> None:
        names = list(names)
        self._states.mark_loaded(*names)
        for model in named:
            self._states.mark_named(model)
        for model in names:  # its `min_replicas` come up now, not at the next tick
            record = self._models.get(model)
            if record is not None:
                record.endpoint.poke()

    async def unload(
        self, name: str, *, wait: bool = True, unload_dependents: bool = False
    ) -> None:
        """The repository unload call: refused from now on (explicit mode), its replicas
        drained to zero (activator.fleet.reload); it keeps no `min_replicas` until loaded
        again (activator.endpoint.autoscaler.kept_replicas). Without `wait` the drain runs
        on after the return, as Triton's unload "does not wait for the model to be fully
        unloaded": a call that came through one of the model's own replicas (a handed-off
        connection) cannot wait for that replica's drain, which waits for the call. The
        loaded ensembles that run it go down with it (and come back with it: `_bring_back`),
        and with `unload_dependents` the models an unloaded ensemble runs that no other
        ensemble runs and that were not loaded by name, as Triton 2.51's unload
        (tritonconfig.unload_plan); ensembles first."""
        removed: set[str] = set()
        down: set[str] = set()
        ensembles: set[str] = set()
        if name in self._models:
            graph = {  # the ensembles loaded or down with a step, and the models they run
                model: self._steps(model)
                for model, record in self._models.items()
                if record.composing
                and (self._states.loaded(model) or model in self._states.down_with_a_step())
            }
            named = {model for model in self._models if self._states.named(model)}
            plan = unload_plan(name, graph, unload_dependents=unload_dependents, named=named)

            def served(model: str) -> bool:  # a step not loaded stays as it is
                return model in self._models and self._states.loaded(model)

            removed = {model for model in plan.removed if served(model)}
            down = {model for model in plan.down if served(model)}
            ensembles = graph.keys() & (removed | down)
        for model in sorted(ensembles):  # first: their requests finish before their steps go
            await self._unload_one(model, wait=wait, down=model in down)
        await self._unload_one(name, wait=wait)
        for model in sorted(removed - ensembles):
            await self._unload_one(model, wait=wait)

    async def _unload_one(self, name: str, *, wait: bool, down: bool = False) -> None:
        """Unload `name` (`down`: an ensemble down with a step, which comes back with it)."""
        if name in self._models:  # a served model (not unavailable, not unknown)
            if self._shared is not None:  # the fleet's first (503 when it cannot be written)
                await self._shared.write_load_states({name: DOWN if down else "unloaded"})
            self._states.mark_unloaded(name, with_a_step=down)
            if self._states.tracked:
                await self._unload_on_direct_replicas(name)
            if not wait:
                self._drain_later(name, direct_told=True)
                return
        if name not in self._models and not self._in_repository(name):
            # No such directory (or no name at all): thaw serve's words, one answer on both.
            raise UnknownModel(unload_not_in_repository(name))
        await self._reloader.unload(name, self._states.refusal(name))

    def _in_repository(self, name: str) -> bool:
        """Whether the repository has a model `name` (its 503 or 400 raised for one it has
        but cannot serve)."""
        if not is_model_name(name):
            return False
        try:
            self._repository.get(name)
        except UnknownModel:
            return False
        return True

    async def _unload_on_direct_replicas(self, name: str) -> None:
        """Tell each replica of `name` that holds handed-off client connections to unload it:
        their next requests for it then go to the front door (runtime.direct.routing), which
        refuses them as it refuses every other, instead of being answered by a replica that
        only drains. Requests it has accepted still run (Triton's unload); one that does not
        answer is drained all the same. Its statistics are kept as they are just before (an
        unloaded model has none on the replica; the requests still running are not counted)."""
        endpoint = self._models[name].endpoint
        timeout_s = self._drain_timeout_s

        async def unload(replica: Replica) -> None:
            await endpoint.keep_final_statistics(replica)
            control = RuntimeControl(self._session, replica.url, name=replica.id)
            try:
                await control.unload(name, timeout_s=timeout_s)
            except ActivationFailed as exc:
                logger.warning("model=%s replica %s did not unload before its drain: %s",
                               name, replica.id, exc.message)  # fmt: skip

        await asyncio.gather(*(unload(r) for r in endpoint.directly_connected()))

    async def refresh(self, *names: str) -> None:
        """A request for `names` (models of the repository; one, or every one for the index)
        when this activator knows one of them as not loaded: learn the fleet's shared load
        state now (another activator may have answered its load a moment ago: a client's next
        request need not come back to the activator that loaded it); what changed is adopted
        before the return. Nothing without a shared state."""
        if self._shared is not None and self.stale(*names):
            await self._shared.refresh_load_states()

    def stale(self, *names: str) -> bool:
        """Whether a request for `names` would learn the shared load state afresh (`refresh`):
        one of them is a model of the repository not loaded here, and the state is shared."""
        return self._shared is not None and any(
            n in self._models and not self._states.loaded(n) for n in names
        )

    def adopt(self, changes: Mapping[str, str]) -> None:
        """Another activator's loads and unloads (model -> "loaded" | "named" | "unloaded" |
        "down"), as the shared state told them: a loaded model's `min_replicas` come up (one
        loaded by name is marked so here too); an unloaded one is
        refused from now on and drained here too (its replicas on this activator), as the
        unload call does."""
        self._mark_loaded_here(
            (m for m, s in changes.items() if s in (LOADED, NAMED)),
            (m for m, s in changes.items() if s == NAMED),
        )
        for name, state in changes.items():
            if state not in ("unloaded", DOWN):
                continue
            self._states.mark_unloaded(name, with_a_step=state == DOWN)
            if name in self._models:
                self._drain_later(name)

    def _drain_later(self, name: str, *, direct_told: bool = False) -> None:
        task = asyncio.create_task(self._drain(name, direct_told=direct_told))
        self._drains.add(task)
        task.add_done_callback(self._drains.discard)

    async def _drain(self, name: str, *, direct_told: bool = False) -> None:
        try:
            if not direct_told:
                await self._unload_on_direct_replicas(name)
            await self._reloader.unload(name, self._states.refusal(name))
        except Exception:
            logger.exception("model=%s: drain after its unload failed", name)

    async def close(self) -> None:
        """Stop the drains of unloads learned from other activators (the fleet closes)."""
        for task in list(self._drains):
            task.cancel()
        for task in list(self._drains):
            with contextlib.suppress(asyncio.CancelledError):
                await task
