"""Scaler backend whose replicas are runtime pods in Thaw's namespace (`--scaler kubernetes`).

    start_replica ─▶ a serving pod of the model this activator has not attached?  attach it
                 └▶ (scaling leader, pod_starter) claim a ready warm-pool pod (a patch carrying
                    its resourceVersion; 409 → the next pod) or, with none ready, create a
                    model pod from the pool's placement class's template; load the model
                    (RuntimeControl), attach it (its serving mark is written meanwhile)
                 └▶ (follower) a request to the leader: wait for a pod it claims for the
                    model, attach it once it answers the model ready; withdrawn (no failure)
                    when no request waits any more or this activator's role changes
                    (follower_start)
    wait_lost    ─▶ the pod watch (pod_informer): deleted, deleting, finished, restarted,
                    unready too long, or drained by the leader
    stop_replica ─▶ detach; the leader also marks it draining, lets peers see that, deletes it
                    with a grace period (the runtime finishes in-flight requests on SIGTERM)

A replica's addresses are its pod IP's: the runtime's KServe v2 HTTP surface (the container
port named `http`, else 8000: proxied requests, model control, /metrics) and its gRPC service
(named `grpc`, else 8001: forwarded gRPC calls). Readiness is probed on each pod directly (its
`/v2/health/ready`, the model's ready endpoint), never waited for through the API: a pod is
used as soon as it answers. Pods outlive the activator: after a restart `running_replicas`
attaches the model's serving pods again, and at shutdown (`release`) this activator gives up
the Lease and only lets go of its pods. The scaling leader (leader_election) also runs the
collection pass (pod_collector). Concurrency of the other activators comes through
`peer_reports` (the `PeerConcurrency` capability). Shared models' replicas (`SharedPlacement`,
decision 0022) are routed by `shared_routing`. Explicit mode's load state (`SharedLoadState`,
decision 0024) is the fleet's, in its load-state Lease (`load_state_lease`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp

from activator.errors import ActivationFailed, ScalerUnavailable
from activator.observe.metrics import Metrics
from activator.scaler.backend import (
    ModelActivity,
    PeerLoad,
    PoolStatus,
    ReplicaHandle,
    SharedCounts,
    SharedReplicaStatus,
)
from activator.scaler.kube_config import DEFAULT_CLASS, KubernetesConfig
from activator.scaler.kubernetes.api import KubeApi, KubeApiError, open_api_client
from activator.scaler.kubernetes.attachments import Attachments, pod_of, pods_of_model
from activator.scaler.kubernetes.backoff import Backoff
from activator.scaler.kubernetes.follower_start import poll_s as follow_poll_s
from activator.scaler.kubernetes.follower_wait import FollowerLook, follow
from activator.scaler.kubernetes.leader_election import LeaderElection
from activator.scaler.kubernetes.load_state_lease import SharedLoadStates
from activator.scaler.kubernetes.peer_reports import PeerReports
from activator.scaler.kubernetes.pod_budget import booked_models, shared_status
from activator.scaler.kubernetes.pod_claim import state_patch
from activator.scaler.kubernetes.pod_collector import PodCollector
from activator.scaler.kubernetes.pod_informer import PodInformer
from activator.scaler.kubernetes.pod_starter import PodStarter
from activator.scaler.kubernetes.pod_state import (
    ANNOTATION_MODEL,
    LABEL_FLEET,
    LABEL_MODEL,
    Pod,
    PodState,
    annotation,
    is_deleting,
    is_ready,
    name_of,
    state_of,
    unschedulable,
)
from activator.scaler.kubernetes.shared_replicas import is_shared_replica
from activator.scaler.kubernetes.shared_routing import Share, SharedRouting
from activator.scaler.shared_settings import SharedSettings

__all__ = ["KubernetesBackend"]

logger = logging.getLogger(__name__)

_FOLLOWER_HOLD_S = 1.0  # a follower's held requests look again this often while a pod loads
_LOST_POLL_S = 0.5  # wait_lost re-checks readiness this often between pod events


class KubernetesBackend:
    """Runs replicas as pods; implements ScalerBackend, AsyncLifecycle, PeerConcurrency,
    NodeWait, SharedPlacement (decision 0022) and SharedLoadState (decision 0024)."""

    def __init__(
        self,
        kube: KubernetesConfig,
        session: aiohttp.ClientSession,
        metrics: Metrics,
        *,
        drain_timeout_s: float,
        api_client: Any | None = None,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        shared: SharedSettings | None = None,
    ) -> None:
        self._kube = kube
        self._session = session
        self._metrics = metrics
        self._drain_timeout_s = drain_timeout_s
        self._api_client = api_client
        self._owns_client = api_client is None
        self._clock = clock
        self._rng = rng or random.Random()
        self._backoff = Backoff(*kube.backoff_s)
        self._attached = Attachments(kube, session, rng=self._rng, clock=clock)
        self._loading: set[str] = set()  # pods this activator is claiming or loading now
        self._tasks: list[asyncio.Task[None]] = []
        self._election: LeaderElection | None = None
        self._reports: PeerReports | None = None
        self._collector = PodCollector(kube.models, orphan_grace_s=kube.orphan_grace_s)
        self._api: KubeApi | None = None
        self._pools: dict[str, PodInformer] = {}  # placement class -> its pool's pods
        self._pods: PodInformer | None = None
        self._starters: dict[str, PodStarter] = {}  # placement class -> its pod starter
        self._released = False  # after release(): no longer owns pods, only lets go
        self._role_changes = 0  # bumped on every change of scaling role (follower starts end)
        self._demand_wakers: list[tuple[str, Callable[[], object]]] = []
        self._shared = SharedRouting(
            kube, shared or kube.shared, session, self._attached, metrics=metrics, clock=clock,
            pods=self._started_informer, leading=lambda: self.leading,
            follower_look=self._follower_look,
        )  # fmt: skip
        self._shares: list[Share] = []  # SharedPlacement.share calls, handed over at start
        self._load_states = SharedLoadStates()  # SharedLoadState: explicit mode's, shared

    # ---- set-up (StartsAsync) -----------------------------------------------------------

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self.close()  # nothing of a failed start stays open, or usable
            self._pods = None
            self._pools, self._starters = {}, {}
            raise

    async def _start(self) -> None:
        kube = self._kube
        try:
            import kubernetes_asyncio  # noqa: F401  (the `kubernetes` extra)
        except ImportError as exc:
            raise ScalerUnavailable(
                "kubernetes scaler: kubernetes-asyncio is not installed "
                "(pip install 'thaw-serve[kubernetes]')"
            ) from exc
        try:
            if self._api_client is None:
                self._api_client = await open_api_client(kube)
            self._api = api = KubeApi(
                self._api_client, kube.namespace, timeout_s=kube.api_timeout_s
            )
            await api.require_access()
            self._pods = self._informer(f"{LABEL_FLEET}={kube.fleet},{LABEL_MODEL}", "model pods")
            for pool_class in kube.classes().values():
                pool = self._informer(pool_class.selector_text, f"{pool_class.name} pool pods")
                self._pools[pool_class.name] = pool
                self._starters[pool_class.name] = starter = PodStarter(
                    kube,
                    api,
                    self._session,
                    self._metrics,
                    pool=pool,
                    pods=self._pods,
                    pool_class=pool_class,
                    backoff=self._backoff,
                    rng=self._rng,
                    clock=self._clock,
                )
                await starter.fetch_pool()
                if (mismatch := starter.selector_mismatch()) is not None:
                    raise ScalerUnavailable(f"kubernetes scaler: {mismatch}")
        except KubeApiError as exc:
            raise ScalerUnavailable(f"kubernetes scaler: {exc.message}") from exc
        try:
            async with asyncio.timeout(kube.api_timeout_s):
                informers = [self._pods, *self._pools.values()]
                await asyncio.gather(*(i.synced.wait() for i in informers))
        except TimeoutError:
            raise ScalerUnavailable(
                f"kubernetes scaler: pods in namespace {kube.namespace!r} could not be listed "
                f"within {kube.api_timeout_s:g} s"
            ) from None
        self._shared.open(api, self._starters, peer_busy=self._peer_busy, shares=self._shares)
        if self._load_states.wanted:
            lease = await self._load_states.open(
                api, kube, backoff=self._backoff, rng=self._rng, clock=self._clock
            )
            self._spawn(lease.run())
        if kube.leader_election:
            await self._start_peers(api)
        else:
            self._metrics.scaling_leader.set(1)
        self._spawn(self._collect_loop())

    # ---- SharedLoadState (activator.scaler.kubernetes.load_state_lease) ------------------

    def share_load_state(self, changed: Callable[[Mapping[str, str]], None]) -> None:
        self._load_states.share(changed)

    def load_states(self) -> Mapping[str, str]:
        return self._load_states.states()

    async def write_load_states(self, changes: Mapping[str, str]) -> None:
        await self._load_states.write(changes)

    async def refresh_load_states(self) -> None:
        await self._load_states.refresh()

    def _peer_busy(self, model: str) -> bool:
        """(Leader) whether the activators' last reports had a request of `model`."""
        if self._reports is None:
            return False
        load = self._reports.totals().get(model)
        return load is not None and (load.current > 0 or load.mean > 0)

    def _informer(self, selector: str, what: str) -> PodInformer:
        assert self._api is not None  # set by start()
        informer = PodInformer(
            self._api,
            selector,
            what=what,
            watch_timeout_s=self._kube.watch_timeout_s,
            backoff=self._backoff,
            rng=self._rng,
            on_error=self._api_retry,
        )
        self._spawn(informer.run())
        return informer

    async def _start_peers(self, api: KubeApi) -> None:
        kube = self._kube
        self._reports = PeerReports(
            kube.activator_id,
            self._session,
            self._metrics,
            models=frozenset(kube.models),
            host=kube.peer_host,
            port=kube.peer_port,
            interval_s=kube.report_interval_s,
            ttl_s=kube.report_ttl_s,
            is_leader=lambda: self.leading,
            leader=lambda: self._election.holder if self._election else None,
            leader_url=lambda: self._election.leader_url if self._election else None,
        )
        for model, wake in self._demand_wakers:
            self._reports.watch_demand(model, wake)
        try:
            await self._reports.start()
        except OSError as exc:
            raise ScalerUnavailable(
                f"kubernetes scaler: cannot listen for peer reports on "
                f"{kube.peer_host}:{kube.peer_port}: {exc.strerror or exc}"
            ) from exc
        host = kube.advertise_host or kube.peer_host
        self._election = LeaderElection(
            api,
            kube.lease_name,
            kube.activator_id,
            duration_s=kube.lease_duration_s,
            peer_url=f"http://{host}:{self._reports.port}",
            on_change=self._role_changed,
            clock=self._clock,
        )
        self._spawn(self._election.run())
        self._spawn(self._reports.run())

    @property
    def leading(self) -> bool:
        """Whether this activator scales (claims and deletes pods) now."""
        if self._released:
            return False
        return self._election.leading if self._election is not None else True

    def _role_changed(self, leading: bool) -> None:
        self._role_changes += 1
        if leading and self._pods is not None:
            self._adopt_loading()  # a lost leader's pods that this activator serves already
            self._spawn(self._take_over_shared())
        self._metrics.scaling_leader.set(1 if leading else 0)
        role = "the scaling leader" if leading else "a follower"
        logger.info("activator %s is %s now", self._kube.activator_id, role)

    # ---- ScalerBackend --------------------------------------------------------------------

    async def start_replica(self, model: str, *, timeout_s: float) -> ReplicaHandle:
        self._started_informer()
        if self._shared.shares(model):
            if self.leading:
                return await self._shared.start(model, timeout_s)
            return await self._shared.follow(model, timeout_s)
        start = self._clock()
        deadline = start + timeout_s
        handle = await self._attach_serving(model, start)
        if handle is not None:
            return handle
        if self.leading:
            return await self._bring_up(model, start, deadline)
        return await self._follow(model, start, deadline)

    async def _follow(self, model: str, start: float, deadline: float) -> ReplicaHandle:
        """A follower's start: a request to the scaling leader, satisfied by a pod it claims
        for `model` (attached once serving); withdrawn or failed as `follower_start` says."""

        async def find() -> ReplicaHandle | None:
            handle = await self._attach_serving(model, start)
            return handle or await self._attach_serving(model, start, state=PodState.LOADING)

        def failure() -> str:
            holder = self._election.holder if self._election is not None else None
            return (
                f"no replica of model '{model}' appeared within {deadline - start:g} s: "
                f"the scaling leader ({holder or 'none now'}) did not start one"
            )

        claimed = lambda: len(self._loading_pods(model))  # noqa: E731
        look = self._follower_look(model, find, claimed, poll_s=follow_poll_s, failure=failure)
        return await follow(
            self._started_informer(), look, model=model, start=start, deadline=deadline,
            clock=self._clock,
        )  # fmt: skip

    def _follower_look(
        self,
        model: str,
        find: Callable[[], Awaitable[ReplicaHandle | None]],
        claimed: Callable[[], int],
        *,
        poll_s: Callable[[float, int], float],
        failure: Callable[[], str],
        hard_deadline: bool = False,
    ) -> FollowerLook:
        """A follower start's look at `model`: this activator's demand, attachments and role
        (a change of role since now withdraws it) with the kind of start's own parts."""
        began = self._role_changes
        return FollowerLook(
            find=find,
            claimed=claimed,
            demand=lambda: self._reports.demand(model) if self._reports is not None else 1,
            attached=lambda: self._attached.count(model),
            role_changed=lambda: self._role_changes != began,
            poll_s=poll_s,
            failure=failure,
            hard_deadline=hard_deadline,
        )

    def _loading_pods(self, model: str) -> list[Pod]:
        """Pods of `model` claimed or created (by the leader) that are still loading."""
        return pods_of_model(self._started_informer().pods(), model, PodState.LOADING)

    async def running_replicas(self, model: str) -> list[ReplicaHandle]:
        self._started_informer()
        if self._shared.shares(model):
            return await self._shared.adopt(model)
        handles = []
        while (handle := await self._attach_serving(model, self._clock())) is not None:
            handles.append(handle)
        return handles

    async def wait_lost(self, replica_id: str) -> str:
        pods = self._started_informer()
        while True:
            seen = pods.version
            pod = pods.get(pod_of(replica_id))
            reason = self._attached.lost_reason(replica_id, pod, leading=self.leading)
            if reason is not None:
                return reason
            await pods.wait_change(seen, _LOST_POLL_S)

    async def stop_replica(self, replica_id: str, *, timeout_s: float) -> None:
        attached = self._attached.pop(replica_id)
        if attached is None or not self.leading:
            return  # a follower only stops routing to it: the pod is the leader's to delete
        if is_shared_replica(replica_id) and (sharing := self._shared.replicas) is not None:
            await sharing.stop(replica_id, timeout_s=timeout_s)  # the pod stays
            return
        await self._retire_pod(replica_id, attached.model, timeout_s)

    def pool_status(self) -> PoolStatus:
        size = ready = 0
        for name, starter in self._starters.items():  # every class's pool together
            size += int((starter.deployment.get("spec") or {}).get("replicas") or 0)
            pool = self._pools[name].pods()
            ready += sum(
                1
                for p in pool
                if is_ready(p) and not is_deleting(p) and not annotation(p, ANNOTATION_MODEL)
            )
        return PoolStatus(size=size, ready=ready)

    async def release(self) -> None:
        """Shutdown, before the endpoints drain: hand the Lease over and stop owning pods, so
        their drains only let go (the pods serve the other activators and a restarted one)."""
        self._released = True
        if self._election is not None:
            await self._election.release()

    async def close(self) -> None:
        for starter in self._starters.values():
            starter.close()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._reports is not None:
            await self._reports.close()
        if self._owns_client and self._api_client is not None:
            await self._api_client.close()

    # ---- PeerConcurrency ------------------------------------------------------------------

    def exchange(self, model: str, *, mean: float, current: int) -> PeerLoad:
        if self._reports is None:
            return PeerLoad()
        return self._reports.exchange(model, mean=mean, current=current)

    def forget_demand(self, model: str) -> None:
        if self._reports is not None:
            self._reports.forget_demand(model)

    def watch_demand(self, model: str, wake: Callable[[], object]) -> None:
        # The endpoints register before `start()` makes the report server: kept here and
        # handed over then (dropping them left the leader to notice a follower's demand at
        # its next tick, up to a tick late: issue 21, defect 4).
        self._demand_wakers.append((model, wake))
        if self._reports is not None:
            self._reports.watch_demand(model, wake)

    # ---- SharedPlacement (decision 0022) -----------------------------------------------------

    def share(
        self,
        model: str,
        *,
        image_bytes: int,
        activity: Callable[[], ModelActivity],
        evict: Callable[[], Awaitable[None]],
        resources: frozenset[str] = frozenset(),
    ) -> None:
        # `resources` is never given here: `thaw up --rate-limit` is refused with this scaler.
        self._shares.append((model, image_bytes, activity, evict))
        if (sharing := self._shared.replicas) is not None:
            sharing.share(model, image_bytes=image_bytes, activity=activity, evict=evict)

    def shared_status(self) -> tuple[SharedReplicaStatus, ...]:
        if self._pods is None:
            return ()
        return shared_status(self._pods.pods(), self._kube.runtime_port)

    def shared_counts(self) -> Mapping[str, SharedCounts]:
        return self._shared.counts()

    # ---- NodeWait ---------------------------------------------------------------------------

    def waiting_for_node(self, model: str) -> bool:
        if any(model in s.node_waits.values() for s in self._starters.values()):
            return True  # a start of ours waits for a node
        if self.leading or self._pods is None:
            return False
        return any(unschedulable(p) is not None for p in self._loading_pods(model))

    def hold_until(self, model: str) -> float | None:
        holds = [
            until for s in self._starters.values() for m, until in s.holds.values() if m == model
        ]
        if not self.leading and self._pods is not None and self._loading_pods(model):
            # A follower holds while the leader's pod for the model is on its way (a node
            # being provisioned, an image pulled): the leader's start has its own deadline,
            # and deletes the pod when it fails.
            holds.append(self._clock() + _FOLLOWER_HOLD_S)
        return max(holds, default=None)

    # ---- attaching, claiming, loading -------------------------------------------------------

    async def _attach_serving(
        self, model: str, start: float, *, state: PodState = PodState.SERVING
    ) -> ReplicaHandle | None:
        """Attach a pod of `model` in `state` that answers its model-ready probe, if any (a
        follower also probes the leader's loading pods: one serves as soon as it answers,
        before its `serving` mark has come through the watch)."""
        candidates = pods_of_model(self._started_informer().pods(), model, state)
        return await self._attached.attach_ready(candidates, model, start=start, skip=self._loading)

    async def _bring_up(self, model: str, start: float, deadline: float) -> ReplicaHandle:
        """Claim a pool pod (or create one), load `model` into it, attach it."""
        if not self._starters:
            raise ActivationFailed("the kubernetes scaler is not started")
        pool_class = self._kube.class_of(model)
        starter = self._starters.get(pool_class)
        if starter is None:  # refused at start-up (cli); a config built elsewhere
            known = ", ".join(self._starters)
            raise ActivationFailed(
                f"model '{model}': no placement class {pool_class!r} (classes: {known}; "
                "--pool-class NAME=DEPLOYMENT)"
            )
        pod, url, claimed_s = await starter.bring_up(model, start, deadline, loading=self._loading)
        restore_s = self._clock() - start - claimed_s
        return self._attached.attach(pod, model, url, claim_s=claimed_s, restore_s=restore_s)

    # ---- scale-down, collection, API helpers ------------------------------------------------

    async def _retire_pod(self, name: str, model: str, timeout_s: float) -> None:
        """Mark draining (peers stop routing), give them time to see it, delete gracefully."""
        starter = self._started()
        for each in self._starters.values():  # the serving mark must land before this one
            await each.marked(name)
        deadline = self._clock() + timeout_s
        try:
            await starter.call(
                lambda: self._api_().patch_pod(name, state_patch(PodState.DRAINING)), deadline
            )
        except KubeApiError as exc:
            if exc.status == 404:
                return
            logger.warning(
                "replica %s model=%s: draining mark failed: %s", name, model, exc.message
            )
        if self._reports is not None and self._reports.live_peers():
            await asyncio.sleep(self._kube.drain_notice_s)
        await starter.delete(name, grace_s=max(1, math.ceil(timeout_s)))
        logger.info("replica %s model=%s deleted", name, model)

    async def _collect_loop(self) -> None:
        while True:
            await asyncio.sleep(self._kube.collect_interval_s)
            if not self.leading:
                continue
            pods = self._started_informer()
            self._adopt_loading()
            owned = self._attached.pods() | self._loading
            if (sharing := self._shared.replicas) is not None:
                owned |= sharing.loading
                owned |= {name_of(p) for p in pods.pods() if booked_models(p)}
                with contextlib.suppress(KubeApiError):
                    await sharing.release(grace_s=self._drain_timeout_s)
            for collect in self._collector.sweep(pods.pods(), owned=owned, now=self._clock()):
                logger.info("collecting pod %s (%s)", collect.pod, collect.reason)
                self._metrics.collected_pods.labels(collect.reason).inc()
                grace_s = max(1, math.ceil(self._drain_timeout_s))
                await self._started().delete(collect.pod, grace_s=grace_s)
            with contextlib.suppress(KubeApiError):
                for starter in self._starters.values():
                    await starter.fetch_pool()

    async def _take_over_shared(self) -> None:
        """(Just promoted) the leader's look at the shared pods' bookings (SharedRouting)."""
        try:
            await self._shared.take_over()
        except (TimeoutError, KubeApiError, aiohttp.ClientError) as exc:
            # The next promotion or start looks again; the bookings stay as they were.
            logger.warning("shared bookings not re-checked after promotion: %s", exc)

    def _adopt_loading(self) -> None:
        """(Leader) the serving mark of each attached pod still marked `loading` by nobody
        here: one a follower attached while the leader that claimed it loaded it, and that
        leader died before its mark was written."""
        pods = self._started_informer()
        for name, attached in self._attached.items():
            pod = pods.get(name)
            if pod is None or name in self._loading or state_of(pod) is not PodState.LOADING:
                continue
            starter = self._starters.get(self._kube.class_of(attached.model))
            if starter is not None and not is_deleting(pod):
                starter.adopt(pod, attached.model)

    def _api_retry(self, exc: KubeApiError) -> None:
        self._metrics.api_retries.labels(str(exc.status)).inc()

    def _api_(self) -> KubeApi:
        if self._api is None:
            raise ActivationFailed("the kubernetes scaler is not started")
        return self._api

    def _started(self) -> PodStarter:
        starter = self._starters.get(DEFAULT_CLASS)
        if starter is None:
            raise ActivationFailed("the kubernetes scaler is not started")
        return starter  # API calls and deletes, whatever the pod's class

    def _started_informer(self) -> PodInformer:
        if self._pods is None:
            raise ActivationFailed("the kubernetes scaler is not started")
        return self._pods

    def _spawn(self, coro: Awaitable[None]) -> None:
        self._tasks.append(asyncio.ensure_future(coro))
