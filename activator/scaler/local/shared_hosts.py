"""Runtimes shared by `thaw.placement` shared models on the local backend: place, load, evict,
unload, release.

    start(model)  ── lock ─▶ placement.place(need, hosts, now, peers)
                     │ PlaceOn(host, evict)    each victim's endpoint takes it to zero (drained,
                     │                         then `stop` unloads it); its room is then reserved
                     │ NewHost                 a warm-pool process is claimed as a new host
                  ── load over the runtime's repository API (reserved room kept meanwhile)
                  ── the load's source (host tier / node cache / store / files) read from the
                     runtime's `thaw_model_loads_total`, counted per model
    stop(replica) ─▶ unload; an unload refused stops the whole host (its memory is not known)
    release loop  ─▶ hosts empty for `release_grace_s` are stopped (host tier keeps the images)

One placement at a time (an asyncio lock around decide + evict + reserve), so two wakes cannot
book the same room (nor two models that must share a rate limiter start two hosts); loads
themselves run concurrently. A model's footprint is its image bytes
plus `model_overhead_bytes`. Replica ids are the endpoint's; a host's id is its process name.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import aiohttp

from activator.errors import ActivationFailed
from activator.observe.metrics import Metrics
from activator.scaler.backend import ModelActivity, SharedCounts, SharedReplicaStatus
from activator.scaler.local.replica_process import ReplicaProcess
from activator.scaler.local.warm_pool import WarmPool
from activator.scaler.local_config import SharedSettings
from activator.scaler.placement import Host, NewHost, Resident, due_for_release, place
from activator.scaler.runtime_control import RuntimeControl, grown_sources

__all__ = ["SharedHosts"]

logger = logging.getLogger(__name__)

_RELEASE_POLL_S = 0.5


@dataclass(frozen=True)
class _Shared:
    """A model registered as shared: its footprint, how to read and evict it, and the
    rate-limiter resources it names (`--rate-limit`: it runs beside the models naming one)."""

    nbytes: int
    activity: Callable[[], ModelActivity]
    evict: Callable[[], Awaitable[None]]
    resources: frozenset[str] = frozenset()


@dataclass
class _Resident:
    replica_id: str
    model: str
    nbytes: int
    loaded_at: float
    gone: asyncio.Event = field(default_factory=asyncio.Event)  # unloaded or evicted


@dataclass
class _Host:
    id: str
    proc: ReplicaProcess
    budget_bytes: int
    residents: dict[str, _Resident] = field(default_factory=dict)  # by replica id
    reserved_bytes: int = 0
    loading: list[str] = field(default_factory=list)  # models whose load is in progress
    empty_since: float | None = None
    loads_seen: dict[tuple[str, str], float] = field(default_factory=dict)  # (model, source)

    def view(self, shared: dict[str, _Shared]) -> Host:
        """This host as the placement policy sees it, with each model's load now."""
        residents = []
        for r in self.residents.values():
            act = shared[r.model].activity()
            last = max(r.loaded_at, act.last_request_at or r.loaded_at)
            residents.append(
                Resident(r.model, r.nbytes, act.in_flight, act.held, last, pinned=act.pinned)
            )
        return Host(self.id, self.budget_bytes, tuple(residents), self.reserved_bytes,
                     self.empty_since, tuple(self.loading))  # fmt: skip


class SharedHosts:
    """The shared runtimes of one local backend and the models placed in them."""

    def __init__(
        self,
        pool: WarmPool,
        settings: SharedSettings,
        session: aiohttp.ClientSession,
        *,
        drain_timeout_s: float,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pool = pool
        self._settings = settings
        self._session = session
        self._drain_timeout_s = drain_timeout_s
        self._metrics = metrics
        self._clock = clock
        self._shared: dict[str, _Shared] = {}
        self._hosts: dict[str, _Host] = {}
        self._where: dict[str, _Host] = {}  # replica id -> its host
        self._lock = asyncio.Lock()
        self._ids = itertools.count(1)
        self._releaser: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self.evictions: dict[str, int] = {}  # model -> times evicted
        self.loads: dict[str, dict[str, int]] = {}  # model -> source -> loads

    def share(
        self,
        model: str,
        *,
        image_bytes: int,
        activity: Callable[[], ModelActivity],
        evict: Callable[[], Awaitable[None]],
        resources: frozenset[str] = frozenset(),
    ) -> None:
        nbytes = max(0, image_bytes) + self._settings.model_overhead_bytes
        self._shared[model] = _Shared(nbytes, activity, evict, resources)

    def _peers(self, model: str) -> frozenset[str]:
        """The other shared models naming a rate-limiter resource `model` names."""
        mine = self._shared[model].resources
        if not mine:
            return frozenset()
        return frozenset(m for m, s in self._shared.items() if m != model and s.resources & mine)

    def shares(self, model: str) -> bool:
        return model in self._shared

    def owns(self, replica_id: str) -> bool:
        return replica_id in self._where

    # ---- a replica's room ---------------------------------------------------------------

    async def start(
        self,
        model: str,
        replica_id: str,
        deadline: float,
        parameters: Mapping[str, str] | None = None,
    ) -> ReplicaProcess:
        """Load `model` (with the load call's `parameters`) into a host with room (evicting
        idle models, or claiming a new host) before `deadline`; returns the host's process,
        the model READY in it."""
        need = self._shared[model].nbytes
        host = await self._reserve(model, need, deadline)
        try:
            await host.proc.load(model, max(0.01, deadline - self._clock()), parameters)
        except BaseException as exc:
            if not isinstance(exc, ActivationFailed):  # cancelled: the runtime may load it
                self._unload_later(host, model)
            raise
        finally:
            host.reserved_bytes -= need
            host.loading.remove(model)
            self._emptied(host)
        host.residents[replica_id] = _Resident(replica_id, model, need, self._clock())
        host.empty_since = None
        self._where[replica_id] = host
        try:
            await self._count_load(host, model)
        except asyncio.CancelledError:  # nobody will know of this replica: give it back
            await self.stop(replica_id)
            raise
        logger.info(
            "model=%s loaded into shared replica %s (%d of %d bytes used)",
            model, host.id, host.view(self._shared).used_bytes, host.budget_bytes,
        )  # fmt: skip
        return host.proc

    async def _reserve(self, model: str, need: int, deadline: float) -> _Host:
        async with self._lock:
            views = [h.view(self._shared) for h in self._hosts.values() if h.proc.alive]
            decision = place(
                model,
                need,
                views,
                now=self._clock(),
                grace_s=self._settings.evict_grace_s,
                budget_bytes=self._settings.budget_bytes,
                peers=self._peers(model),
            )
            if isinstance(decision, NewHost):
                logger.info("model=%s new shared replica: %s", model, decision.reason)
                host = await self._new_host(model, decision.budget_bytes, deadline)
            else:
                host = self._hosts[decision.host]
                if decision.over_budget:
                    logger.warning(
                        "model=%s placed in shared replica %s over its budget, beside the "
                        "models naming its rate-limiter resources", model, host.id,
                    )  # fmt: skip
                for victim in decision.evict:
                    await self._evict(victim, host, model)
                room = decision.over_budget or host.view(self._shared).free_bytes >= need
                if not host.proc.alive or not room:
                    # A victim could not be unloaded (its host was stopped for it) or outlasted
                    # the drain timeout: this wake fails, the next one places again.
                    raise ActivationFailed(f"no room for model '{model}' in shared replica")
            host.reserved_bytes += need
            host.loading.append(model)
            host.empty_since = None
            return host

    async def _new_host(self, model: str, budget_bytes: int, deadline: float) -> _Host:
        proc = await self._pool.claim(model, deadline)
        self._pool.refill_later()
        proc.name = f"shared-{next(self._ids)}"
        host = _Host(proc.name, proc, budget_bytes)
        self._hosts[host.id] = host
        self._ensure_releaser()
        return host

    async def _evict(self, victim: str, host: _Host, for_model: str) -> None:
        """Take `victim` to zero through its endpoint (drained, then unloaded by `stop`)."""
        logger.info("model=%s evicted from shared replica %s for model=%s", victim, host.id,
                    for_model)  # fmt: skip
        self.evictions[victim] = self.evictions.get(victim, 0) + 1
        if self._metrics is not None:
            self._metrics.shared_evictions.labels(victim).inc()
        # Its room is free once its replica here is unloaded: `evict` returns sooner when the
        # model was already draining on its own (its scale to zero in progress).
        gone = [r.gone for r in host.residents.values() if r.model == victim]
        await self._shared[victim].evict()
        with contextlib.suppress(TimeoutError):
            waits = (event.wait() for event in gone)
            await asyncio.wait_for(asyncio.gather(*waits), self._drain_timeout_s)

    async def stop(self, replica_id: str) -> None:
        """Unload the replica's model from its host (idempotent; unknown ids are no-ops)."""
        host = self._where.pop(replica_id, None)
        if host is None:
            return
        resident = host.residents.pop(replica_id)
        resident.gone.set()
        if host.proc.alive and host.proc.control is not None:
            try:
                await host.proc.control.unload(resident.model, timeout_s=self._drain_timeout_s)
            except ActivationFailed as exc:
                # Its memory is not known any more: stop the host (its models are lost, and
                # woken again elsewhere on their next request).
                logger.warning("shared replica %s: %s; stopping it", host.id, exc.message)
                await self._stop_host(host)
                return
        self._emptied(host)

    def _unload_later(self, host: _Host, model: str) -> None:
        """Unload `model` in the background: a load this side gave up on may still finish."""
        control = host.proc.control
        if control is None or not host.proc.alive:
            return

        async def unload() -> None:
            with contextlib.suppress(ActivationFailed):
                await control.unload(model, timeout_s=self._drain_timeout_s)

        task = asyncio.get_running_loop().create_task(unload())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _emptied(self, host: _Host) -> None:
        if not host.residents and host.reserved_bytes == 0 and host.empty_since is None:
            host.empty_since = self._clock()

    async def wait_lost(self, replica_id: str) -> str:
        host = self._where.get(replica_id)
        if host is None:
            return "stopped"
        resident = host.residents[replica_id]
        exited = asyncio.ensure_future(host.proc.proc.wait())
        gone = asyncio.ensure_future(resident.gone.wait())
        try:
            await asyncio.wait({exited, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            exited.cancel()
            gone.cancel()
        if resident.gone.is_set():
            return "unloaded"
        tail = host.proc.stderr_tail(4)
        code = host.proc.proc.returncode
        return f"shared replica {host.id} exited (code {code})" + (f": {tail}" if tail else "")

    # ---- where the weights came from ----------------------------------------------------

    async def _count_load(self, host: _Host, model: str) -> None:
        """Read the host's load counters and count the source whose count grew."""
        control = RuntimeControl(self._session, host.proc.url, name=host.id)
        counts = await control.load_counts(model)
        if counts is None:
            logger.debug("shared replica %s: no load counters", host.id)
            return
        before = {s: n for (m, s), n in host.loads_seen.items() if m == model}
        for source in grown_sources(before, counts):
            by_source = self.loads.setdefault(model, {})
            by_source[source] = by_source.get(source, 0) + 1
            if self._metrics is not None:
                self._metrics.shared_loads.labels(model, source).inc()
        for source, count in counts.items():
            host.loads_seen[(model, source)] = count

    # ---- releasing empty hosts ------------------------------------------------------------

    def _ensure_releaser(self) -> None:
        if self._releaser is None or self._releaser.done():
            self._releaser = asyncio.get_running_loop().create_task(self._release_loop())

    async def _release_loop(self) -> None:
        while self._hosts:
            await asyncio.sleep(_RELEASE_POLL_S)
            # Under the placement lock: a host being released is never chosen meanwhile.
            async with self._lock:
                views = [h.view(self._shared) for h in self._hosts.values()]
                grace_s = self._settings.release_grace_s
                for host_id in due_for_release(views, now=self._clock(), grace_s=grace_s):
                    logger.info("shared replica %s released: its models are all at zero", host_id)
                    await self._stop_host(self._hosts[host_id])
                for host in [h for h in self._hosts.values() if not h.proc.alive]:
                    if not host.residents:
                        self._hosts.pop(host.id, None)

    async def _stop_host(self, host: _Host) -> None:
        self._hosts.pop(host.id, None)
        for replica_id in list(host.residents):
            self._where.pop(replica_id, None)
        code = await host.proc.stop(self._drain_timeout_s)
        logger.info("shared replica %s stopped (exit code %s)", host.id, code)

    # ---- report and close -----------------------------------------------------------------

    def status(self) -> tuple[SharedReplicaStatus, ...]:
        """Every shared runtime now: its models, budget and use."""
        return tuple(
            SharedReplicaStatus(
                id=h.id,
                pid=h.proc.proc.pid,
                url=h.proc.url,
                budget_bytes=h.budget_bytes,
                used_bytes=h.view(self._shared).used_bytes,
                models=tuple(sorted(r.model for r in h.residents.values())),
            )
            for h in sorted(self._hosts.values(), key=lambda h: h.id)
        )

    def counts(self) -> dict[str, SharedCounts]:
        """Each shared model's evictions and loads by source so far."""
        return {
            model: SharedCounts(self.evictions.get(model, 0), dict(self.loads.get(model, {})))
            for model in sorted(self._shared)
        }

    async def close(self) -> None:
        for task in [*self._background, *([self._releaser] if self._releaser else [])]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await asyncio.gather(*(self._stop_host(h) for h in list(self._hosts.values())))
