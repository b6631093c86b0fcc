"""The pods this activator routes to: attaching a pod of a model once its runtime answers the
model ready, and telling when an attached pod is lost (deleted, finished, restarted, drained,
unbooked, or unready too long).

A dedicated replica is its pod (the replica id is the pod's name); a shared replica is a room
in a shared pod (`shared_replicas`: the id names the pod and the model). Either way the pod's
restart count is remembered when attached: a restart means the runtime came back empty.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import aiohttp

from activator.scaler.backend import ReplicaHandle
from activator.scaler.kube_config import KubernetesConfig
from activator.scaler.kubernetes.pod_budget import booked_models
from activator.scaler.kubernetes.pod_state import (
    ANNOTATION_MODEL,
    Pod,
    PodState,
    annotation,
    grpc_address,
    is_deleting,
    is_finished,
    is_ready,
    name_of,
    restart_count,
    runtime_url,
    state_of,
)
from activator.scaler.kubernetes.shared_replicas import is_shared_replica, split_replica_id
from activator.scaler.runtime_control import RuntimeControl

__all__ = ["Attached", "Attachments", "pod_of", "pods_of_model"]

logger = logging.getLogger(__name__)


@dataclass
class Attached:
    """A replica this activator routes to: its runtime's address and restarts when attached."""

    model: str
    url: str
    restarts: int
    unready_since: float | None = None


def pod_of(replica_id: str) -> str:
    """The pod a replica is: its id, or for a shared replica the pod in its id."""
    return split_replica_id(replica_id)[0] if is_shared_replica(replica_id) else replica_id


class Attachments:
    """Replica id -> `Attached`, and the probes and checks that add and drop them."""

    def __init__(
        self,
        kube: KubernetesConfig,
        session: aiohttp.ClientSession,
        *,
        rng: random.Random,
        clock: Callable[[], float],
    ) -> None:
        self._kube = kube
        self._session = session
        self._rng = rng
        self._clock = clock
        self._by_id: dict[str, Attached] = {}

    def __contains__(self, replica_id: str) -> bool:
        return replica_id in self._by_id

    def get(self, replica_id: str) -> Attached | None:
        return self._by_id.get(replica_id)

    def pop(self, replica_id: str) -> Attached | None:
        return self._by_id.pop(replica_id, None)

    def items(self) -> list[tuple[str, Attached]]:
        return list(self._by_id.items())

    def count(self, model: str) -> int:
        """How many replicas of `model` this activator routes to."""
        return sum(1 for a in self._by_id.values() if a.model == model)

    def pods(self, model: str | None = None) -> set[str]:
        """The pods of the replicas attached (of `model` only, when given)."""
        return {pod_of(r) for r, a in self._by_id.items() if model is None or a.model == model}

    async def attach_ready(
        self,
        candidates: Iterable[Pod],
        model: str,
        *,
        start: float,
        skip: set[str],
    ) -> ReplicaHandle | None:
        """Attach one of `candidates` (pods of `model`, in random order) whose runtime answers
        the model ready; pods attached or in `skip` (being claimed here) are passed over."""
        found = [p for p in candidates if name_of(p) not in self._by_id and name_of(p) not in skip]
        self._rng.shuffle(found)
        for pod in found:
            url = runtime_url(pod, self._kube.runtime_port)
            if url is None:
                continue
            if await RuntimeControl(self._session, url, name=name_of(pod)).model_ready(model):
                if name_of(pod) in self._by_id:  # attached by a concurrent start meanwhile
                    continue
                return self.attach(pod, model, url, claim_s=self._clock() - start, restore_s=0)
        return None

    def attach(
        self, pod: Pod, model: str, url: str, *, claim_s: float, restore_s: float
    ) -> ReplicaHandle:
        """Route to `pod` (a dedicated replica of `model`) from now on."""
        name = name_of(pod)
        grpc = grpc_address(pod, self._kube.runtime_grpc_port)
        self._by_id[name] = Attached(model, url, restart_count(pod))
        logger.info("replica %s model=%s attached at %s (gRPC %s)", name, model, url, grpc)
        return ReplicaHandle(
            name, model, url, claim_s=claim_s, restore_s=restore_s, grpc_address=grpc
        )

    def attach_shared(self, replica_id: str, pod: Pod | None, model: str, url: str) -> str | None:
        """Route to `replica_id`, a room of `model` in the shared `pod`; its gRPC address."""
        restarts = restart_count(pod) if pod is not None else 0
        self._by_id[replica_id] = Attached(model, url, restarts)
        logger.info("replica %s model=%s attached (shared pod %s)", replica_id, model,
                    pod_of(replica_id))  # fmt: skip
        return grpc_address(pod, self._kube.runtime_grpc_port) if pod is not None else None

    def lost_reason(self, replica_id: str, pod: Pod | None, *, leading: bool) -> str | None:
        """Why the attached `replica_id` (whose pod is now `pod`) is lost, or None while it
        serves. A pod unready for `unready_lost_s` in a row is lost."""
        attached = self._by_id.get(replica_id)
        if attached is None:
            return "stopped"
        if pod is None:
            return "pod deleted"
        if is_deleting(pod):
            return "pod is being deleted"
        if is_finished(pod):
            return f"pod {pod.get('status', {}).get('phase', '').lower()}"
        if restart_count(pod) > attached.restarts:
            return "its runtime container restarted (the model is no longer loaded)"
        if state_of(pod) is PodState.DRAINING:
            return "drained by the scaling leader"
        # A follower learns of an eviction from the booking; the leader, which evicts through
        # the model's endpoint (its scale to zero), must not also see it as a loss: the
        # endpoint would start a replica again at once, evicting another (thrashing).
        if (
            is_shared_replica(replica_id)
            and not leading
            and attached.model not in booked_models(pod)
        ):
            return "unloaded from its shared pod (evicted, or scaled to zero by the leader)"
        if is_ready(pod):
            attached.unready_since = None
            return None
        now = self._clock()
        attached.unready_since = attached.unready_since or now
        if now - attached.unready_since >= self._kube.unready_lost_s:
            return f"pod not ready for {self._kube.unready_lost_s:g} s"
        return None


def pods_of_model(pods: Iterable[Pod], model: str, state: PodState) -> list[Pod]:
    """Live pods of `model` (its annotation) in `state`."""
    return [
        p
        for p in pods
        if annotation(p, ANNOTATION_MODEL) == model
        and state_of(p) is state
        and not is_deleting(p)
        and not is_finished(p)
    ]
