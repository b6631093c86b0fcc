"""Where this activator routes shared models' requests: their rooms booked on shared pods
(decision 0022), for `KubernetesBackend`.

    start(model)  ─▶ (leader) a room on a shared pod (SharedReplicas.start), attached
    follow(model) ─▶ (follower) a shared pod whose booking lists the model, once its runtime
                     answers it ready (follower_wait)
    adopt(model)  ─▶ at start: the rooms booked before this activator started, routed to;
                     the leader unbooks those whose runtime does not have the model
    take_over()   ─▶ (a follower promoted to leader) the same leader's look at every shared
                     model's bookings, which as a follower it never made

The leader's placement (SharedPods, SharedReplicas) is made at start (`open`), once the API
and every placement class's pool starter are there, with the models the backend was told to
share: a shared model's rooms are on shared pods of its own class.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping

import aiohttp

from activator.observe.metrics import Metrics
from activator.scaler.backend import ModelActivity, ReplicaHandle, SharedCounts
from activator.scaler.kube_config import KubernetesConfig
from activator.scaler.kubernetes.api import KubeApi
from activator.scaler.kubernetes.attachments import Attachments, pod_of
from activator.scaler.kubernetes.follower_wait import FollowerLook, follow
from activator.scaler.kubernetes.pod_budget import booked_models
from activator.scaler.kubernetes.pod_informer import PodInformer
from activator.scaler.kubernetes.pod_starter import PodStarter
from activator.scaler.kubernetes.pod_state import (
    LABEL_FLEET,
    LABEL_MODEL,
    Pod,
    name_of,
    runtime_url,
)
from activator.scaler.kubernetes.shared_pods import SharedPods
from activator.scaler.kubernetes.shared_replicas import SharedReplicas
from activator.scaler.runtime_control import RuntimeControl
from activator.scaler.shared_settings import SharedSettings

__all__ = ["Share", "SharedRouting"]

logger = logging.getLogger(__name__)

# A `SharedPlacement.share` call: (model, image_bytes, activity, evict).
Share = tuple[str, int, Callable[[], ModelActivity], Callable[[], Awaitable[None]]]

_SHARED_POLL_S = 0.25  # a follower waiting for a shared pod looks again this often


class SharedRouting:
    """Shared models' replicas as this activator routes them (the backend's SharedPlacement).

    `pods` is the backend's started pod cache (ActivationFailed before start), `leading`
    whether this activator scales now, `follower_look` the backend's look of a follower's
    start (its demand, attachments and role)."""

    def __init__(
        self,
        kube: KubernetesConfig,
        settings: SharedSettings,
        session: aiohttp.ClientSession,
        attached: Attachments,
        *,
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
        pods: Callable[[], PodInformer],
        leading: Callable[[], bool],
        follower_look: Callable[..., FollowerLook],
    ) -> None:
        self._kube = kube
        self._settings = settings
        self._session = session
        self._attached = attached
        self._metrics = metrics
        self._clock = clock
        self._pods = pods
        self._leading = leading
        self._follower_look = follower_look
        self.replicas: SharedReplicas | None = None  # made at start, with every class's pool

    def open(
        self,
        api: KubeApi,
        starters: Mapping[str, PodStarter],
        *,
        peer_busy: Callable[[str], bool],
        shares: Iterable[Share],
    ) -> None:
        """At start: the leader's placement on shared pods, with the models shared so far."""
        settings = self._settings
        selector = f"{LABEL_FLEET}={self._kube.fleet},{LABEL_MODEL}"
        pods = SharedPods(
            api, selector, budget_bytes=settings.budget_bytes, grace_s=settings.evict_grace_s,
            release_grace_s=settings.release_grace_s, runtime_port=self._kube.runtime_port,
            clock=self._clock,
        )  # fmt: skip
        self.replicas = SharedReplicas(
            pods, starters, self._session, class_of=self._kube.class_of,
            overhead_bytes=settings.model_overhead_bytes, clock=self._clock,
            metrics=self._metrics, peer_busy=peer_busy,
        )  # fmt: skip
        for model, image_bytes, activity, evict in shares:
            self.replicas.share(model, image_bytes=image_bytes, activity=activity, evict=evict)

    def shares(self, model: str) -> bool:
        """Whether `model` is shared (its replicas are rooms on shared pods); False before
        start."""
        return self.replicas is not None and self.replicas.shares(model)

    def counts(self) -> Mapping[str, SharedCounts]:
        if self.replicas is None:
            return {}
        sharing = self.replicas
        models = set(sharing.evictions) | set(sharing.loads)
        return {
            m: SharedCounts(evictions=sharing.evictions[m], loads=dict(sharing.loads.get(m, {})))
            for m in sorted(models)
        }

    async def start(self, model: str, timeout_s: float) -> ReplicaHandle:
        """A shared model's replica: its room on a shared pod (decision 0022)."""
        assert self.replicas is not None  # the caller checked
        shared = await self.replicas.start(model, timeout_s=timeout_s)
        pod = self._pods().get(pod_of(shared.id))
        grpc = self._attached.attach_shared(shared.id, pod, model, shared.url)
        return dataclasses.replace(shared, grpc_address=grpc)

    async def follow(self, model: str, timeout_s: float) -> ReplicaHandle:
        """A follower's replica of a shared model: a shared pod whose booking lists the model
        and whose runtime answers it ready; the leader places one on this activator's demand
        (peer_reports), as for a dedicated model (follower_start decides when to give up)."""
        sharing = self.replicas
        assert sharing is not None  # the caller checked
        start = self._clock()

        async def find() -> ReplicaHandle | None:
            return await self.attach_booked(model, start)

        look = self._follower_look(
            model, find, lambda: len(self.booked_pods(model)),
            poll_s=lambda _elapsed, _booked: _SHARED_POLL_S,
            failure=lambda: f"no shared pod of model '{model}' appeared within {timeout_s:g} s",
            hard_deadline=True,
        )  # fmt: skip
        return await follow(
            self._pods(), look, model=model, start=start,
            deadline=start + timeout_s, clock=self._clock,
        )  # fmt: skip

    async def attach_booked(self, model: str, start: float) -> ReplicaHandle | None:
        """Route to one more shared pod whose booking lists `model` and whose runtime answers
        it ready; None when there is none."""
        sharing = self.replicas
        assert sharing is not None  # the caller checked
        for pod in self.booked_pods(model):
            url = runtime_url(pod, self._kube.runtime_port)
            if url is None:
                continue
            if await RuntimeControl(self._session, url, name=name_of(pod)).model_ready(model):
                replica = sharing.attach(name_of(pod), model, url)
                grpc = self._attached.attach_shared(replica, pod, model, url)
                return ReplicaHandle(
                    replica, model, url, claim_s=self._clock() - start, restore_s=0.0,
                    grpc_address=grpc, host=name_of(pod),
                )  # fmt: skip
        return None

    async def adopt(self, model: str) -> list[ReplicaHandle]:
        """At start: the rooms of `model` booked on shared pods before this activator started
        (a restart, a rolling update: `release` leaves them booked and loaded), each routed to
        where its pod's runtime has the model loaded. The leader also frees the rooms of
        bookings whose pod's runtime answers that it does not have the model (restarted):
        nothing else would ever unbook them. A runtime that does not answer keeps its
        booking (the model may be loaded there)."""
        sharing = self.replicas
        assert sharing is not None  # the caller checked
        handles = []
        while (handle := await self.attach_booked(model, self._clock())) is not None:
            sharing.adopted(model)
            handles.append(handle)
            logger.info("model=%s: adopted its room on shared pod %s", model, handle.host)
        if self._leading():
            await self._unbook_stale(model)
        return handles

    async def take_over(self) -> None:
        """(A follower promoted to scaling leader) what the leader does at start, for every
        shared model: the rooms this activator routes to count as loaded now (least recently
        used eviction orders by it), and bookings whose pod's runtime answers that it does not
        have the model are freed. As a follower it never looked; the leader it replaces may
        have died between a booking and its load."""
        sharing = self.replicas
        if sharing is None:
            return
        for model in sharing.models():
            if self._attached.pods(model):
                sharing.adopted(model)
            await self._unbook_stale(model)

    async def _unbook_stale(self, model: str) -> None:
        """(Leader) free `model`'s rooms booked on pods this activator does not route it to
        whose runtime answers that it does not have the model; a runtime that does not answer
        keeps its booking (the model may be loaded there)."""
        sharing = self.replicas
        assert sharing is not None  # the caller checked
        for pod in self.booked_pods(model):  # booked, not routed to: is it loaded there?
            url = runtime_url(pod, self._kube.runtime_port)
            control = RuntimeControl(self._session, url, name=name_of(pod)) if url else None
            if control is not None and await control.model_answer(model) is False:
                logger.warning("shared pod %s model=%s: booked but not loaded; unbooked",
                               name_of(pod), model)  # fmt: skip
                await sharing.unbook(name_of(pod), model)

    def booked_pods(self, model: str) -> list[Pod]:
        """Live shared pods whose booking lists `model` and that this activator does not
        route `model` to yet."""
        mine = self._attached.pods(model)
        return [
            p for p in self._pods().pods() if model in booked_models(p) and name_of(p) not in mine
        ]
