"""The control-plane loops the fake API server runs: Deployment -> ReplicaSet -> Pods, and the
garbage collector that follows `ownerReferences`.

What they do is what Thaw's warm pool relies on: a ReplicaSet keeps `spec.replicas` active pods
matching its selector, releases (drops its controller reference from) a pod relabelled out of
the selector and creates a replacement, adopts an orphan that matches, and scales down by the
real ranking (unscheduled, pending, not ready, lower `controller.kubernetes.io/pod-deletion-cost`,
newest first). A Deployment owns one ReplicaSet per pod-template hash; a template change scales
the new one up and the old ones to zero at once (no rolling update, no conditions).
"""

from __future__ import annotations

import asyncio
import collections
import copy
import logging
from collections.abc import Mapping
from typing import Any

from tests.fakes.kube_errors import StatusError
from tests.fakes.kube_resources import DEPLOYMENTS, PODS, REPLICASETS, ResourceType, template_hash
from tests.fakes.kube_selectors import selector_from_object
from tests.fakes.kube_store import EventType, Store, StoreEvent

__all__ = ["Controllers", "orphan_dependents"]

logger = logging.getLogger(__name__)

_WATCHED = {PODS.key, REPLICASETS.key, DEPLOYMENTS.key}
_PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


def _owner_ref(rtype: ResourceType, owner: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": rtype.api_version,
        "kind": rtype.kind,
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _controller_uid(obj: Mapping[str, Any]) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def _is_ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _is_active(pod: Mapping[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return not pod["metadata"].get("deletionTimestamp") and phase not in ("Succeeded", "Failed")


def _deletion_order(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pods in the order a ReplicaSet deletes them when scaling down."""

    def cost(pod: Mapping[str, Any]) -> int:
        raw = (pod["metadata"].get("annotations") or {}).get(DELETION_COST, "0")
        try:
            return int(raw)
        except ValueError:
            return 0

    newest_first = sorted(
        pods,
        key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]),
        reverse=True,
    )
    return sorted(
        newest_first,
        key=lambda p: (
            bool((p.get("spec") or {}).get("nodeName")),
            _PHASE_RANK.get((p.get("status") or {}).get("phase", "Pending"), 0),
            _is_ready(p),
            cost(p),
        ),
    )


def orphan_dependents(store: Store, types: Mapping[str, ResourceType], owner_uid: str) -> None:
    """Drop `owner_uid` from every dependent's ownerReferences (propagationPolicy=Orphan)."""
    with store.lock:
        for key, obj in store.all_objects():
            refs = obj["metadata"].get("ownerReferences") or []
            if any(ref.get("uid") == owner_uid for ref in refs):
                keep = [ref for ref in refs if ref.get("uid") != owner_uid]
                meta = obj["metadata"]

                def drop(o: dict[str, Any], keep: list[dict[str, Any]] = keep) -> dict[str, Any]:
                    o["metadata"]["ownerReferences"] = keep
                    return o

                store.update(types[key], meta.get("namespace"), meta["name"], drop)


class Controllers:
    """Reconciles after every relevant write, on the server's event loop."""

    def __init__(self, store: Store, types: Mapping[str, ResourceType], *, bugs: list[str]) -> None:
        self._store = store
        self._bugs = bugs
        self._types = types
        self._gone: collections.deque[str] = collections.deque()
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def run(self) -> None:
        """Reconcile until cancelled."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._store.subscribe(self._on_event, None)
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                try:
                    self.reconcile()
                except Exception as exc:  # a bug in the fake: keep reconciling, fail the test
                    logger.exception("fake controller bug")
                    self._bugs.append(f"controllers: {exc!r}")
        finally:
            self._store.unsubscribe(self._on_event)

    def _on_event(self, event: StoreEvent) -> None:
        # Called under the store lock, from whichever thread wrote: hand on, never block.
        if event.type is EventType.DELETED:
            self._gone.append(event.object["metadata"]["uid"])
        elif event.resource not in _WATCHED:
            return
        if self._loop is not None and self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    def reconcile(self) -> None:
        with self._store.lock:
            self._collect_garbage()
            for deployment in self._store.objects(DEPLOYMENTS, None)[0]:
                self._guarded(self._sync_deployment, deployment)
            for replicaset in self._store.objects(REPLICASETS, None)[0]:
                self._guarded(self._sync_replicaset, replicaset)

    def _guarded(self, step: Any, obj: dict[str, Any]) -> None:
        try:
            step(obj)
        except StatusError as exc:
            logger.warning(
                "controller step for %s/%s failed: %s",
                obj["kind"],
                obj["metadata"]["name"],
                exc.message,
            )

    # --- garbage collector -----------------------------------------------------------------

    def _collect_garbage(self) -> None:
        gone: set[str] = set()
        while self._gone:
            gone.add(self._gone.popleft())
        if not gone:
            return
        for key, obj in self._store.all_objects():
            refs = obj["metadata"].get("ownerReferences") or []
            if not any(ref.get("uid") in gone for ref in refs):
                continue
            meta, rtype = obj["metadata"], self._types[key]
            keep = [ref for ref in refs if ref.get("uid") not in gone]
            if keep:

                def drop(o: dict[str, Any], keep: list[dict[str, Any]] = keep) -> dict[str, Any]:
                    o["metadata"]["ownerReferences"] = keep
                    return o

                self._store.update(rtype, meta.get("namespace"), meta["name"], drop)
            elif not meta.get("deletionTimestamp"):
                self._store.delete(rtype, meta.get("namespace"), meta["name"])

    # --- ReplicaSet ------------------------------------------------------------------------

    def _sync_replicaset(self, rs: dict[str, Any]) -> None:
        meta, spec = rs["metadata"], rs["spec"]
        namespace, uid = meta["namespace"], meta["uid"]
        selector = selector_from_object(spec.get("selector"))
        owned: list[dict[str, Any]] = []
        for pod in self._store.objects(PODS, namespace)[0]:
            controller = _controller_uid(pod)
            matches = selector.matches(pod["metadata"].get("labels"))
            if controller == uid and matches:
                owned.append(pod)
            elif controller == uid:
                self._set_owner(pod, None, uid)  # relabelled out of the selector: release it
            elif (
                controller is None
                and matches
                and _is_active(pod)
                and not meta.get("deletionTimestamp")
            ):
                owned.append(self._set_owner(pod, _owner_ref(REPLICASETS, rs), uid))
        active = [pod for pod in owned if _is_active(pod)]
        if not meta.get("deletionTimestamp"):
            diff = int(spec.get("replicas", 1)) - len(active)
            for _ in range(diff):
                active.append(self._create_pod(rs))
            for pod in _deletion_order(active)[: max(-diff, 0)]:
                self._store.delete(PODS, namespace, pod["metadata"]["name"])
                active.remove(pod)
        ready = sum(1 for pod in active if _is_ready(pod))
        self._set_status(
            REPLICASETS,
            rs,
            {
                "replicas": len(active),
                "fullyLabeledReplicas": len(active),
                "readyReplicas": ready,
                "availableReplicas": ready,
                "observedGeneration": meta.get("generation", 1),
            },
        )

    def _set_owner(
        self, pod: dict[str, Any], ref: dict[str, Any] | None, uid: str
    ) -> dict[str, Any]:
        def change(o: dict[str, Any]) -> dict[str, Any]:
            refs = [r for r in o["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
            o["metadata"]["ownerReferences"] = refs + ([ref] if ref else [])
            if not o["metadata"]["ownerReferences"]:
                del o["metadata"]["ownerReferences"]
            return o

        meta = pod["metadata"]
        return self._store.update(PODS, meta["namespace"], meta["name"], change)

    def _create_pod(self, rs: dict[str, Any]) -> dict[str, Any]:
        template = copy.deepcopy(rs["spec"].get("template") or {})
        tmeta = template.get("metadata") or {}
        pod = {
            "metadata": {
                "generateName": f"{rs['metadata']['name']}-",
                "labels": tmeta.get("labels") or {},
                "ownerReferences": [_owner_ref(REPLICASETS, rs)],
            },
            "spec": template.get("spec") or {},
        }
        if tmeta.get("annotations"):
            pod["metadata"]["annotations"] = tmeta["annotations"]
        return self._store.create(PODS, rs["metadata"]["namespace"], pod)

    def _set_status(self, rtype: ResourceType, obj: dict[str, Any], status: dict[str, Any]) -> None:
        if {**(obj.get("status") or {}), **status} == (obj.get("status") or {}):
            return

        def change(o: dict[str, Any]) -> dict[str, Any]:
            o["status"] = {**(o.get("status") or {}), **status}
            return o

        meta = obj["metadata"]
        self._store.update(rtype, meta["namespace"], meta["name"], change, subresource="status")

    # --- Deployment ------------------------------------------------------------------------

    def _sync_deployment(self, deployment: dict[str, Any]) -> None:
        meta, spec = deployment["metadata"], deployment["spec"]
        if meta.get("deletionTimestamp"):
            return
        namespace, desired = meta["namespace"], int(spec.get("replicas", 1))
        digest = template_hash(spec.get("template") or {})
        owned = [
            rs
            for rs in self._store.objects(REPLICASETS, namespace)[0]
            if _controller_uid(rs) == meta["uid"]
        ]
        current = next(
            (
                rs
                for rs in owned
                if (rs["metadata"].get("labels") or {}).get("pod-template-hash") == digest
            ),
            None,
        )
        if current is None:
            current = self._store.create(
                REPLICASETS, namespace, self._replicaset_for(deployment, digest, len(owned) + 1)
            )
        elif current["spec"].get("replicas") != desired:
            current = self._scale(current, desired)
        for old in owned:
            if old["metadata"]["uid"] != current["metadata"]["uid"] and old["spec"].get("replicas"):
                self._scale(old, 0)
        owned = [
            rs
            for rs in self._store.objects(REPLICASETS, namespace)[0]
            if _controller_uid(rs) == meta["uid"]
        ]
        totals = {
            key: sum((rs.get("status") or {}).get(key, 0) for rs in owned)
            for key in ("replicas", "readyReplicas", "availableReplicas")
        }
        updated = next(
            (rs for rs in owned if rs["metadata"]["uid"] == current["metadata"]["uid"]), current
        )
        self._set_status(
            DEPLOYMENTS,
            deployment,
            {
                **totals,
                "updatedReplicas": (updated.get("status") or {}).get("replicas", 0),
                "unavailableReplicas": max(desired - totals["availableReplicas"], 0),
                "observedGeneration": meta.get("generation", 1),
            },
        )

    def _scale(self, rs: dict[str, Any], replicas: int) -> dict[str, Any]:
        def change(o: dict[str, Any]) -> dict[str, Any]:
            o["spec"]["replicas"] = replicas
            return o

        return self._store.update(
            REPLICASETS, rs["metadata"]["namespace"], rs["metadata"]["name"], change
        )

    @staticmethod
    def _replicaset_for(deployment: dict[str, Any], digest: str, revision: int) -> dict[str, Any]:
        meta, spec = deployment["metadata"], deployment["spec"]
        template = copy.deepcopy(spec.get("template") or {})
        template.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = digest
        selector = copy.deepcopy(spec["selector"])
        selector.setdefault("matchLabels", {})["pod-template-hash"] = digest
        return {
            "metadata": {
                "name": f"{meta['name']}-{digest}",
                "labels": dict(template["metadata"]["labels"]),
                "annotations": {"deployment.kubernetes.io/revision": str(revision)},
                "ownerReferences": [_owner_ref(DEPLOYMENTS, deployment)],
            },
            "spec": {
                "replicas": int(spec.get("replicas", 1)),
                "selector": selector,
                "template": template,
            },
        }
