"""The fake API server's scheduler (`FakeApiServerConfig(scheduler=True)`): nodes a test adds
and removes, pods bound to one that fits, and the real scheduler's verdict when none does.

A pod fits a node when every `spec.nodeSelector` label is on the node and the node holds
fewer than its `max_pods` of the scheduler's active pods. Each unbound pod of
`schedulerName: default-scheduler` is bound (`spec.nodeName`, PodScheduled=True) to the first
node that fits, by name; with none, it gets what kube-scheduler writes —
`PodScheduled=False`, reason `Unschedulable`, message `0/N nodes are available: ...` — and is
tried again whenever a node is added or a pod goes (as a node autoscaler's new node makes a
Pending pod schedulable). Run the test kubelets with `schedule=False`, so that only this binds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.kube_errors import StatusError
from tests.fakes.kube_resources import PODS
from tests.fakes.kube_store import Store, StoreEvent

__all__ = ["FakeNode", "Scheduler"]

logger = logging.getLogger(__name__)

SCHEDULER_NAME = "default-scheduler"


@dataclass(frozen=True)
class FakeNode:
    """A node the scheduler may bind pods to: its labels and how many pods it takes."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    max_pods: int = 110


def _active(pod: Mapping[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return not pod["metadata"].get("deletionTimestamp") and phase not in ("Succeeded", "Failed")


class Scheduler:
    """Binds pending pods after every pod write and every node change, on the server's loop."""

    def __init__(self, store: Store, *, bugs: list[str]) -> None:
        self.nodes: dict[str, FakeNode] = {}
        self._store = store
        self._bugs = bugs
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._wake.set()
        self._store.subscribe(self._on_event, None)
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                try:
                    self.schedule()
                except Exception as exc:  # a bug in the fake: keep going, fail the test
                    logger.exception("fake scheduler bug")
                    self._bugs.append(f"scheduler: {exc!r}")
        finally:
            self._store.unsubscribe(self._on_event)

    def add_node(self, node: FakeNode) -> None:
        """A node joins (call on the server's loop): pending pods are tried again."""
        self.nodes[node.name] = node
        self.poke()

    def remove_node(self, name: str) -> None:
        """A node leaves (its pods stay bound: the test's kubelet decides their fate)."""
        self.nodes.pop(name, None)
        self.poke()

    def poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _on_event(self, event: StoreEvent) -> None:
        # Under the store lock, from whichever thread wrote: hand on, never block.
        if event.resource == PODS.key and self._loop is not None and self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    def schedule(self) -> None:
        with self._store.lock:
            pods = self._store.objects(PODS, None)[0]
            load = {name: 0 for name in self.nodes}
            for pod in pods:
                node = (pod.get("spec") or {}).get("nodeName")
                if node in load and _active(pod):
                    load[node] += 1
            for pod in pods:
                spec = pod.get("spec") or {}
                if spec.get("nodeName") or not _active(pod):
                    continue
                if spec.get("schedulerName", SCHEDULER_NAME) != SCHEDULER_NAME:
                    continue
                node = self._fit(pod, load)
                try:
                    if node is None:
                        self._unschedulable(pod)
                    else:
                        self._bind(pod, node)
                        load[node] += 1
                except StatusError as exc:  # deleted or changed meanwhile: the next pass
                    logger.debug("scheduling %s: %s", pod["metadata"]["name"], exc.message)

    def _fit(self, pod: Mapping[str, Any], load: Mapping[str, int]) -> str | None:
        wanted = (pod.get("spec") or {}).get("nodeSelector") or {}
        for name in sorted(self.nodes):
            node = self.nodes[name]
            labels_fit = all(node.labels.get(k) == v for k, v in wanted.items())
            if labels_fit and load[name] < node.max_pods:
                return name
        return None

    def _message(self, pod: Mapping[str, Any]) -> str:
        total = len(self.nodes)
        if not total:
            return "0/0 nodes are available: no nodes available to schedule pods."
        wanted = (pod.get("spec") or {}).get("nodeSelector") or {}
        mismatch = sum(
            1
            for node in self.nodes.values()
            if not all(node.labels.get(k) == v for k, v in wanted.items())
        )
        parts = []
        if mismatch:
            parts.append(f"{mismatch} node(s) didn't match Pod's node affinity/selector")
        if total - mismatch:
            parts.append(f"{total - mismatch} Too many pods")
        return f"0/{total} nodes are available: {', '.join(parts)}."

    def _unschedulable(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": self._message(pod),
        }

        def mark(current: dict[str, Any]) -> dict[str, Any]:
            status = current.setdefault("status", {})
            status.setdefault("phase", "Pending")
            others = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
            status["conditions"] = [condition, *others]
            return current

        self._store.update(PODS, meta.get("namespace"), meta["name"], mark, subresource="status")

    def _bind(self, pod: Mapping[str, Any], node: str) -> None:
        meta = pod["metadata"]

        def bind(current: dict[str, Any]) -> dict[str, Any]:
            current["spec"]["nodeName"] = node
            status = current.setdefault("status", {})
            others = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
            status["conditions"] = [{"type": "PodScheduled", "status": "True"}, *others]
            return current

        self._store.update(PODS, meta.get("namespace"), meta["name"], bind, subresource="binding")
