"""The scaling leader's replicas of shared models on Kubernetes: a replica is one model's room
booked on a shared runtime pod (`shared_pods`), its id `<pod>/<serial>/<model>`.

    start(model) ─▶ SharedPods.place ─▶ NewHost ─▶ claim a pod of the model's placement class's
                                                   pool, load (PodStarter.bring_up), book it
                                                   (`open`: budget capped by its memory limit
                                                   and, on a GPU pod, its GPUs' memory)
                                     └▶ Booked ─▶ each evicted model's own scale to zero (its
                                                   endpoint drains it: no request cut), then
                                                   unload what is still loaded; load the model
    stop(id)     ─▶ unload the model from the pod, unbook its room (the pod stays)
    release()    ─▶ delete the shared pods booked empty for the release grace

`KubernetesBackend` uses it for shared models when it is the only activator (no leader
election): followers cannot route to shared pods yet (docs/decisions/0022).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

import aiohttp

from activator.errors import ActivationFailed
from activator.observe.metrics import Metrics
from activator.scaler.backend import ModelActivity, ReplicaHandle
from activator.scaler.kube_config import DEFAULT_CLASS
from activator.scaler.kubernetes.api import KubeApiError
from activator.scaler.kubernetes.pod_budget import ModelUse
from activator.scaler.kubernetes.pod_memory import device_room
from activator.scaler.kubernetes.pod_starter import PodStarter
from activator.scaler.kubernetes.pod_state import name_of
from activator.scaler.kubernetes.shared_pods import Booked, SharedPods
from activator.scaler.placement import NewHost
from activator.scaler.runtime_control import RuntimeControl, grown_sources

__all__ = ["SharedReplicas", "is_shared_replica", "replica_id", "split_replica_id"]

logger = logging.getLogger(__name__)


def replica_id(pod: str, model: str, serial: int) -> str:
    """A shared replica's id, `<pod>/<serial>/<model>`: unique for the backend's life (a
    model placed on one pod twice gets two ids); pod names never contain '/'."""
    return f"{pod}/{serial}/{model}"


def split_replica_id(replica: str) -> tuple[str, str]:
    """(pod, model) of a shared replica's id; ValueError for another kind of id."""
    pod, sep, rest = replica.partition("/")
    serial, sep2, model = rest.partition("/")
    if not (sep and sep2 and pod and model and serial.isdigit()):
        raise ValueError(f"{replica!r} is not a shared replica's id (<pod>/<serial>/<model>)")
    return pod, model


def is_shared_replica(replica: str) -> bool:
    return "/" in replica


@dataclass
class _Shared:
    """A shared model: the bytes it books, and its endpoint's hooks."""

    nbytes: int
    activity: Callable[[], ModelActivity]
    evict: Callable[[], Awaitable[None]]
    loaded_at: float = 0.0


class SharedReplicas:
    """Start and stop shared models' replicas on pods (the scaling leader's job)."""

    def __init__(
        self,
        pods: SharedPods,
        starters: Mapping[str, PodStarter],
        session: aiohttp.ClientSession,
        *,
        class_of: Callable[[str], str] = lambda _model: DEFAULT_CLASS,
        overhead_bytes: int,
        clock: Callable[[], float] = time.monotonic,
        metrics: Metrics | None = None,
        peer_busy: Callable[[str], bool] | None = None,
    ) -> None:
        self._pods = pods
        self._starters = starters  # placement class -> its pool's pod starter
        self._class_of = class_of  # model -> its placement class
        self._session = session
        self._overhead_bytes = overhead_bytes
        self._clock = clock
        self._shared: dict[str, _Shared] = {}
        self.loading: set[str] = set()  # pods being claimed and loaded
        self._metrics = metrics
        # Whether the other activators had a request of the model in their last reports: a
        # model busy on a follower is not idle, whatever this activator saw.
        self._peer_busy = peer_busy or (lambda _model: False)
        self.evictions: Counter[str] = Counter()
        self.loads: dict[str, Counter[str]] = {}  # model -> where its loads' weights came from
        self.urls: dict[str, str] = {}  # replica id -> its pod's runtime URL
        self._serial = 0

    def share(
        self,
        model: str,
        *,
        image_bytes: int,
        activity: Callable[[], ModelActivity],
        evict: Callable[[], Awaitable[None]],
    ) -> None:
        """Place `model`'s replicas on shared pods from now on (`SharedPlacement.share`)."""
        self._shared[model] = _Shared(max(0, image_bytes) + self._overhead_bytes, activity, evict)

    def shares(self, model: str) -> bool:
        return model in self._shared

    def models(self) -> list[str]:
        """The shared models, by name."""
        return sorted(self._shared)

    async def start(self, model: str, *, timeout_s: float) -> ReplicaHandle:
        """A replica of `model`: room booked on a shared pod (evicting idle models there, or
        claiming a pool pod), the model loaded in it."""
        entry = self._shared[model]
        start = self._clock()
        deadline = start + timeout_s
        placed = await self._pods.place(
            model, entry.nbytes, self._use(), placement_class=self._class_of(model)
        )
        if isinstance(placed, NewHost):
            return await self._start_on_new_pod(model, entry.nbytes, start, deadline)
        try:
            if placed.url is None:
                raise ActivationFailed(f"shared pod {placed.pod} has no address")
            await self._evict(placed, deadline)
            control = RuntimeControl(self._session, placed.url, name=placed.pod)
            before = await control.load_counts(model) or {}
            await control.load(model, timeout_s=max(0.01, deadline - self._clock()))
        except BaseException:
            # Its room is free again (the models evicted for it stay at zero: their endpoints
            # took them there). Shielded: a cancelled start still frees what it booked.
            with contextlib.suppress(KubeApiError, ActivationFailed):
                await asyncio.shield(self._pods.unbook(placed.pod, model))
            raise
        await self._count_load(control, model, before)
        return self._handle(placed.pod, model, placed.url, claim_s=0.0, start=start)

    async def _start_on_new_pod(
        self, model: str, nbytes: int, start: float, deadline: float
    ) -> ReplicaHandle:
        """No room anywhere: claim a pool pod (or make one), load the model, book the pod. A
        pod loaded but not booked is deleted: nothing would ever count its room."""
        placement_class = self._class_of(model)
        starter = self._starters.get(placement_class)
        if starter is None:
            raise ActivationFailed(
                f"model '{model}': no pool of placement class {placement_class!r} is started"
            )
        pod, url, claim_s = await starter.bring_up(model, start, deadline, loading=self.loading)
        control = RuntimeControl(self._session, url, name=name_of(pod))
        try:
            resident = await control.resident_bytes()  # the runtime with the model in it
            own = None if resident is None else max(0, resident - nbytes)
            gpus = await control.gpu_memory()  # None on a pod without GPUs
            room = None if gpus is None else device_room(gpus[0], gpus[1], nbytes)
            booked = await self._pods.open(
                pod, model, nbytes, own_bytes=own, device_room_bytes=room,
                placement_class=placement_class,
            )  # fmt: skip
        except BaseException:
            await asyncio.shield(starter.delete(name_of(pod), grace_s=1))
            raise
        await self._count_load(control, model, {})
        return self._handle(booked.pod, model, url, claim_s=claim_s, start=start)

    async def stop(self, replica: str, *, timeout_s: float) -> None:
        """Unload the replica's model from its pod and free its room; the pod stays (for the
        other models on it, else until `release`)."""
        pod, model = split_replica_id(replica)
        url = self.urls.pop(replica, None)
        if url is not None:
            control = RuntimeControl(self._session, url, name=pod)
            try:
                await control.unload(model, timeout_s=timeout_s)
            except ActivationFailed as exc:  # the pod is going, or the model was unloaded
                logger.warning("shared pod %s model=%s: unload failed: %s", pod, model, exc)
        await self._pods.unbook(pod, model)

    async def release(self, *, grace_s: float) -> list[str]:
        """Delete the shared pods booked empty for the release grace; returns their names."""
        released = await self._pods.releasable()
        deleter = self._starters[DEFAULT_CLASS]  # deletes any pod, whatever its class
        for name in released:
            await deleter.delete(name, grace_s=max(1, math.ceil(grace_s)))
            logger.info("shared pod %s released: no model on it", name)
        return released

    # ---- parts --------------------------------------------------------------------------

    def _use(self) -> Mapping[str, ModelUse]:
        """Every shared model's use now, as its endpoint sees it (a model with no request
        yet counts from its load)."""
        use = {}
        now = self._clock()
        for model, entry in self._shared.items():
            seen = entry.activity()
            last = now if self._peer_busy(model) else seen.last_request_at
            use[model] = ModelUse(
                in_flight=seen.in_flight,
                held=seen.held,
                last_used_at=max(entry.loaded_at, last if last is not None else 0.0),
                pinned=seen.pinned,
            )
        return use

    async def _count_load(
        self, control: RuntimeControl, model: str, before: dict[str, float]
    ) -> None:
        """Count where the load just done took its weights from (the source whose count on
        the runtime grew: `host` tier, node `cache`, `store`, `files`)."""
        after = await control.load_counts(model)
        for source in grown_sources(before, after or {}):
            self.loads.setdefault(model, Counter())[source] += 1
            if self._metrics is not None:
                self._metrics.shared_loads.labels(model, source).inc()

    async def _evict(self, booked: Booked, deadline: float) -> None:
        """Each evicted model's own scale to zero (its replicas drained through its
        endpoint), then unload whatever of them this pod still holds."""
        for victim in booked.evict:
            self.evictions[victim] += 1
            if self._metrics is not None:
                self._metrics.shared_evictions.labels(victim).inc()
            logger.info("shared pod %s model=%s: evicting for model=%s", booked.pod, victim,
                        booked.model)  # fmt: skip
            await self._shared[victim].evict()
        timeout_s = max(0.01, deadline - self._clock())
        await self._pods.evict(booked, self._session, timeout_s=timeout_s)

    def adopted(self, model: str) -> None:
        """A room of `model` booked before this activator started is routed to now: it
        counts as loaded now (for least-recently-used eviction)."""
        self._shared[model].loaded_at = self._clock()

    async def unbook(self, pod: str, model: str) -> None:
        """Free `model`'s room on `pod` without unloading anything (it is not loaded there)."""
        await self._pods.unbook(pod, model)

    def attach(self, pod: str, model: str, url: str) -> str:
        """A new replica id for `model` on `pod` (a follower routing to a pod the leader
        booked; the leader's own loads too)."""
        self._serial += 1
        replica = replica_id(pod, model, self._serial)
        self.urls[replica] = url
        return replica

    def _handle(
        self, pod: str, model: str, url: str, *, claim_s: float, start: float
    ) -> ReplicaHandle:
        now = self._clock()
        self._shared[model].loaded_at = now
        replica = self.attach(pod, model, url)
        return ReplicaHandle(
            replica, model, url, claim_s=claim_s, restore_s=now - start - claim_s, host=pod
        )
