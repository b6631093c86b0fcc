"""Bringing one runtime pod up for a model: claim a ready warm-pool pod (or create one from the
pool's template), wait for its address and its runtime, load the model, mark it serving.

    candidates (pod_claim) ─▶ claim: merge patch carrying the pod's resourceVersion
        │ 409 Conflict / 404: the next candidate          │ none left: create a model pod
        ▼                                                   ▼
    (a created pod) bound to a node ─▶ address (the pod watch's copy, or the claim's answer)
    ─▶ runtime ready (probed directly, only for a created pod) ─▶ load (RuntimeControl)
    ─▶ thaw.dev/state=serving

A created pod no node can take (PodScheduled=False, Unschedulable: a node autoscaler is to add
one) waits up to `node_provisioning_timeout_s` for a node instead of the start's deadline; the
rest then gets the start's limit (`load_timeout_s`) again from the moment it was bound. While
such a start is in progress, `holds` says until when requests held for its model may wait, and
`node_waits` which of its pods wait for a node now.

Every wait races the pod going away (`_gone`: deleted, restarted, stuck waiting on an image or
its config) and the start's deadline; what failed is named in the ActivationFailed. API calls
are retried with back-off within the deadline (kube_api.with_retries). The caller
(`KubernetesBackend`) deletes a pod whose bring-up failed or was cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp

from activator.errors import ActivationFailed
from activator.observe.metrics import Metrics
from activator.scaler.kube_config import DEFAULT_CLASS, KubernetesConfig, PoolClass
from activator.scaler.kubernetes.api import KubeApi, KubeApiError, with_retries
from activator.scaler.kubernetes.backoff import Backoff
from activator.scaler.kubernetes.model_labels import label_value
from activator.scaler.kubernetes.pod_claim import (
    candidates,
    claim_patch,
    model_pod,
    serving_patch,
    state_patch,
    utc_now_text,
)
from activator.scaler.kubernetes.pod_informer import PodInformer
from activator.scaler.kubernetes.pod_state import (
    Pod,
    PodState,
    cannot_start,
    is_deleting,
    is_finished,
    is_scheduled,
    name_of,
    restart_count,
    runtime_url,
    unschedulable,
)
from activator.scaler.runtime_control import RuntimeControl

__all__ = ["PodStarter"]

logger = logging.getLogger(__name__)
T = TypeVar("T")

_POLL_S = 0.5  # re-check a pod between its watch events this often
_FAILED_DELETE_GRACE_S = 1  # a pod whose start failed holds nothing worth draining


class PodStarter:
    """Claims or creates runtime pods of one placement class and loads models into them (the
    scaling leader's job).

    `pool_class` names the class's warm-pool Deployment and selector; `pool` and `pods` are
    the watch caches of that pool and of the fleet's model pods; `deployment` is the pool
    Deployment as last read (its template, size and uid).
    """

    def __init__(
        self,
        kube: KubernetesConfig,
        api: KubeApi,
        session: aiohttp.ClientSession,
        metrics: Metrics,
        *,
        pool: PodInformer,
        pods: PodInformer,
        pool_class: PoolClass,
        backoff: Backoff,
        rng: random.Random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.deployment: dict[str, Any] = {}
        self.holds: dict[str, tuple[str, float]] = {}  # pod -> (model, its start's deadline)
        self.node_waits: dict[str, str] = {}  # pod -> model, while no node can take it
        self._kube = kube
        self._api = api
        self._session = session
        self._metrics = metrics
        self._pool = pool
        self._pods = pods
        self.pool_class = pool_class
        self._backoff = backoff
        self._rng = rng
        self._clock = clock
        self._marks: dict[str, asyncio.Task[None]] = {}  # pod -> its `serving` mark, in flight

    async def bring_up(
        self, model: str, start: float, deadline: float, *, loading: set[str]
    ) -> tuple[Pod, str, float]:
        """A pod serving `model`: (the pod, its runtime URL, seconds until its runtime was up);
        the pod as last seen, with the IP the URL was made of. Its name is in `loading` while
        it loads; a pod whose bring-up fails or is cancelled is deleted before the error
        (ActivationFailed) or the cancellation goes on. It is returned as soon as the model
        is loaded: its `serving` mark (what lets the other activators attach it, and takes it
        out of the pool) is written meanwhile, off the cold start's path (`marked`)."""
        pod, created = await self._claim_any(model, label_value(model), deadline)
        name = name_of(pod)
        loading.add(name)
        try:
            if created:
                deadline = await self._scheduled(name, model, start, deadline)
            pod, url, claimed_s = await self._loaded(pod, model, created, start, deadline)
        except BaseException as exc:
            await asyncio.shield(self.delete(name, grace_s=_FAILED_DELETE_GRACE_S))
            if isinstance(exc, KubeApiError):
                raise ActivationFailed(f"model '{model}' on pod {name}: {exc.message}") from exc
            raise
        finally:
            loading.discard(name)
            self.holds.pop(name, None)
        self._start_mark(name, model, created)
        return self._pods.get(name) or pod, url, claimed_s

    def adopt(self, pod: Pod, model: str) -> None:
        """Write the `serving` mark of a pod this activator attached while another activator
        (a scaling leader that died since) was loading it. Without it the pod stays `loading`:
        still counted by its pool's ReplicaSet (the pool one warm pod short), and attachable by
        no activator that did not probe it while it loaded."""
        name = name_of(pod)
        if name in self._marks:
            return
        labels = (pod.get("metadata") or {}).get("labels") or {}
        created = not any(key in labels for key, _ in self.pool_class.selector)
        logger.info("pod %s model=%s: adopted from a lost leader, marked serving", name, model)
        self._start_mark(name, model, created)

    def _start_mark(self, name: str, model: str, created: bool) -> None:
        mark = asyncio.ensure_future(self._mark_serving(name, model, created))
        self._marks[name] = mark
        mark.add_done_callback(
            lambda _: self._marks.pop(name, None) if self._marks.get(name) is mark else None
        )

    async def _mark_serving(self, name: str, model: str, created: bool) -> None:
        """Write the `serving` mark (retried within an API timeout); a failure is logged: this
        activator routes to the pod all the same, the others cannot attach it."""
        serving = (
            state_patch(PodState.SERVING)
            if created
            else serving_patch(
                pool_keys=[k for k, _ in self.pool_class.selector],
                owners=self.owner_references(),
            )
        )
        deadline = self._clock() + self._kube.api_timeout_s
        try:
            await self.call(lambda: self._api.patch_pod(name, serving), deadline)
        except KubeApiError as exc:
            logger.warning(
                "pod %s model=%s: serving mark failed (%s): other activators cannot attach it",
                name,
                model,
                exc.message,
            )

    async def marked(self, name: str) -> None:
        """Wait for the pod's `serving` mark to be written (or to fail), if one is in flight:
        a later mark (draining) must not be overtaken by it."""
        task = self._marks.pop(name, None)
        if task is not None:
            await asyncio.shield(task)

    def close(self) -> None:
        """Stop writing marks (the activator is shutting down)."""
        for task in self._marks.values():
            task.cancel()
        self._marks.clear()

    async def delete(self, name: str, *, grace_s: int) -> None:
        """Delete a pod gracefully (SIGTERM, SIGKILL after `grace_s`); failures are logged:
        the collection pass deletes what is left."""
        deadline = self._clock() + self._kube.api_timeout_s
        try:
            await self.call(lambda: self._api.delete_pod(name, grace_s=grace_s), deadline)
        except KubeApiError as exc:
            logger.warning(
                "pod %s: delete failed (%s); the collection pass retries", name, exc.message
            )

    async def fetch_pool(self) -> None:
        """Read the pool Deployment (its pod template, replicas and uid)."""
        name = self.pool_class.deployment
        try:
            self.deployment = await self._api.read_deployment(name)
        except KubeApiError as exc:
            if exc.status != 404:
                raise
            cls = self.pool_class.name
            of_class = "" if cls == DEFAULT_CLASS else f" (placement class {cls!r})"
            raise KubeApiError(
                404,
                "NotFound",
                f"no warm-pool Deployment {name!r}{of_class} in namespace {self._kube.namespace!r}",
            ) from exc

    def selector_mismatch(self) -> str | None:
        """Why the pool Deployment read by `fetch_pool` cannot be this class's pool (its
        selector is not the class's pool selector), or None when it can."""
        pool_class = self.pool_class
        labels = (self.deployment.get("spec") or {}).get("selector", {}).get("matchLabels")
        if labels == dict(pool_class.selector):
            return None
        return (
            f"Deployment {pool_class.deployment!r} (placement class {pool_class.name!r}) "
            f"selects {labels}, but the pool selector is {dict(pool_class.selector)}: "
            "they must be equal"
        )

    async def call(self, op: Callable[[], Awaitable[T]], deadline: float) -> T:
        """`op()` with retries of 429 / 5xx / no answer until `deadline`."""
        return await with_retries(
            op,
            backoff=self._backoff,
            rng=self._rng,
            deadline=deadline,
            clock=self._clock,
            on_retry=lambda exc: self._metrics.api_retries.labels(str(exc.status)).inc(),
        )

    # ---- the steps -------------------------------------------------------------------------

    async def _claim_any(self, model: str, label: str, deadline: float) -> tuple[Pod, bool]:
        """A pool pod claimed for `model` (False), or a model pod created for it (True)."""
        ready, maybe = candidates(self._pool.pods(), self._rng)
        for pod in ready + maybe:
            if pod in maybe and not await self._answers(pod):
                continue
            claimed = await self._claim(pod, model, label, deadline)
            if claimed is not None:
                return claimed, False
        self._metrics.pool_misses.labels(model, self.pool_class.name).inc()
        logger.info(
            "model=%s no warm-pool pod of class %s ready: creating a model pod",
            model,
            self.pool_class.name,
        )
        return await self._create(model, label, deadline), True

    async def _answers(self, pod: Pod) -> bool:
        url = runtime_url(pod, self._kube.runtime_port)
        return (
            url is not None
            and await RuntimeControl(self._session, url, name=name_of(pod)).is_ready()
        )

    async def _claim(self, pod: Pod, model: str, label: str, deadline: float) -> Pod | None:
        kube = self._kube
        patch = claim_patch(
            pod,
            model=model,
            label=label,
            fleet=kube.fleet,
            activator=kube.activator_id,
            now=utc_now_text(),
        )
        try:
            claimed = await self.call(lambda: self._api.patch_pod(name_of(pod), patch), deadline)
        except KubeApiError as exc:
            if exc.status in (404, 409):
                result = "conflict" if exc.status == 409 else "gone"
                self._metrics.pod_claims.labels(model, self.pool_class.name, result).inc()
                logger.info("model=%s claim of pod %s: %s", model, name_of(pod), result)
                return None
            raise ActivationFailed(
                f"model '{model}': claiming a pool pod failed: {exc.message}"
            ) from exc
        self._metrics.pod_claims.labels(model, self.pool_class.name, "claimed").inc()
        logger.info("model=%s claimed pool pod %s", model, name_of(pod))
        return claimed

    async def _create(self, model: str, label: str, deadline: float) -> Pod:
        kube = self._kube
        try:
            await self.call(self.fetch_pool, deadline)
            manifest = model_pod(
                (self.deployment.get("spec") or {}).get("template") or {},
                model=model,
                label=label,
                fleet=kube.fleet,
                activator=kube.activator_id,
                pool_keys=[k for k, _ in self.pool_class.selector],
                now=utc_now_text(),
            )
            manifest["metadata"]["ownerReferences"] = self.owner_references()
            return await self.call(lambda: self._api.create_pod(manifest), deadline)
        except KubeApiError as exc:
            raise ActivationFailed(
                f"model '{model}': creating a pod failed: {exc.message}"
            ) from exc

    async def _scheduled(self, name: str, model: str, start: float, deadline: float) -> float:
        """Wait for a created pod to be bound to a node; the deadline for the rest of the
        start. Not judged (or no scheduler says anything) by `deadline`: the rest decides.
        Unschedulable: wait for a node up to the node-provisioning timeout (ActivationFailed
        after it), then the start's limit starts again."""
        pods, node_timeout_s = self._pods, self._kube.node_provisioning_timeout_s
        waited_since: float | None = None
        why = ""
        try:
            while True:
                seen, now = pods.version, self._clock()
                pod = pods.get(name)
                if pod is not None and is_scheduled(pod):
                    break
                if pod is not None and (is_deleting(pod) or is_finished(pod)):
                    raise ActivationFailed(f"pod {name} went away before a node took it")
                reason = unschedulable(pod) if pod is not None else None
                if reason is not None and waited_since is None:
                    waited_since, why = now, reason
                    until = now + node_timeout_s + (deadline - start)
                    self._node_wait_began(name, model, reason, until)
                if waited_since is None and now >= deadline:
                    return deadline
                if waited_since is not None and now >= waited_since + node_timeout_s:
                    self._metrics.node_waits.labels(model, "timed_out").inc()
                    raise ActivationFailed(
                        f"model '{model}': no node took pod {name} within "
                        f"{node_timeout_s:g} s (--node-provisioning-timeout-s): {why}"
                    )
                limit = deadline if waited_since is None else waited_since + node_timeout_s
                await pods.wait_change(seen, min(_POLL_S, max(0.01, limit - now)))
        finally:
            if self.node_waits.pop(name, None) is not None:
                self._metrics.waiting_for_node.labels(model).dec()
        if waited_since is None:
            return deadline
        now = self._clock()
        self._metrics.node_waits.labels(model, "scheduled").inc()
        logger.info("model=%s pod %s got a node after %.1f s", model, name, now - waited_since)
        rest = max(deadline, now + (deadline - start))
        self.holds[name] = (model, rest)
        return rest

    def _node_wait_began(self, name: str, model: str, why: str, until: float) -> None:
        logger.info("model=%s pod %s waits for a node: %s", model, name, why)
        self.node_waits[name] = model
        self.holds[name] = (model, until)
        self._metrics.waiting_for_node.labels(model).inc()

    async def _loaded(
        self, pod: Pod, model: str, created: bool, start: float, deadline: float
    ) -> tuple[Pod, str, float]:
        """Wait for the pod's address and runtime (probed directly), then load `model`; any
        step races the pod going away. Returns (the pod with its IP, url, seconds until the
        runtime was up)."""
        name = name_of(pod)
        pod, url = await self._until_lost(name, restart_count(pod), self._address(pod), deadline)
        control = RuntimeControl(self._session, url, name=name, clock=self._clock)
        if created:
            await self._until_lost(name, 0, control.wait_ready(deadline), deadline)
        claimed_s = self._clock() - start
        remaining = max(0.01, deadline - self._clock())
        await self._until_lost(name, None, control.load(model, timeout_s=remaining), deadline)
        return pod, url, claimed_s

    async def _address(self, pod: Pod) -> tuple[Pod, str]:
        """`pod` (the watch's copy, else as the claim or create answered it) and its runtime
        URL, once it has an IP (a pod keeps its IP for life: its gRPC address is made of the
        same copy)."""
        pods = self._pods
        while True:
            seen = pods.version
            current = pods.get(name_of(pod)) or pod
            url = runtime_url(current, self._kube.runtime_port)
            if url is not None:
                return current, url
            await pods.wait_change(seen, _POLL_S)

    async def _until_lost(
        self, name: str, restarts: int | None, work: Awaitable[T], deadline: float
    ) -> T:
        """`work`, unless the pod goes away first (ActivationFailed) or `deadline` passes."""
        task = asyncio.ensure_future(work)
        watcher = asyncio.ensure_future(self._gone(name, restarts))
        try:
            done, _ = await asyncio.wait(
                {task, watcher},
                timeout=max(0.0, deadline - self._clock()),
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            watcher.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if task in done:
            return task.result()
        if watcher in done:
            raise ActivationFailed(f"pod {name} {watcher.result()}")
        raise ActivationFailed(f"pod {name} was not ready in time")

    async def _gone(self, name: str, restarts: int | None) -> str:
        """Why the pod we just claimed or created went away (it may not be in the cache yet:
        the watch reports it a moment after the claim or create; absent before that is not
        gone)."""
        pods = self._pods
        cached = False
        while True:
            seen = pods.version
            pod = pods.get(name)
            cached = cached or pod is not None
            if pod is None and cached:
                return "was deleted"
            if pod is None:
                await pods.wait_change(seen, _POLL_S)
                continue
            if is_deleting(pod) or is_finished(pod):
                return "is being deleted" if is_deleting(pod) else "stopped"
            if restarts is not None and restart_count(pod) > restarts:
                return "restarted its runtime"
            stuck = cannot_start(pod)
            if stuck is not None:
                return f"cannot start its runtime: {stuck}"
            await pods.wait_change(seen, _POLL_S)

    def owner_references(self) -> list[dict[str, Any]]:
        """The pool Deployment owns every model pod: uninstalling it deletes them too."""
        meta = self.deployment.get("metadata") or {}
        if not meta.get("uid"):
            return []
        return [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": meta.get("name", self.pool_class.deployment),
                "uid": meta["uid"],
            }
        ]
