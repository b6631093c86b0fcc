"""The collection pass: which claimed pods no model wants any more (pure, time passed in).

The scaling leader runs it every `collect_interval_s` over the fleet's model pods. A pod goes
when its containers finished, when its model is not one this fleet serves, or when it has been
*unowned* for `orphan_grace_s`: neither attached by the leader nor being claimed or loaded by
it. An unowned pod is one an activator claimed and then lost (it died mid-load, or a leader
that ran it died and the new one has not wanted it since): the grace is the time a new leader
has to want it again (its endpoints attach serving pods before claiming new ones).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from activator.scaler.kubernetes.pod_state import (
    ANNOTATION_MODEL,
    Pod,
    annotation,
    is_deleting,
    is_finished,
    name_of,
)

__all__ = ["Collect", "PodCollector"]


@dataclass(frozen=True)
class Collect:
    """Delete pod `pod` because `reason` (also the metric label)."""

    pod: str
    reason: str


class PodCollector:
    """Remembers since when each model pod has been unowned; `sweep` says which go now."""

    def __init__(self, wanted: Iterable[str], *, orphan_grace_s: float) -> None:
        self._wanted = frozenset(wanted)
        self._grace_s = orphan_grace_s
        self._unowned_since: dict[str, float] = {}

    def sweep(self, pods: Iterable[Pod], *, owned: set[str], now: float) -> list[Collect]:
        """`owned`: pods the leader has attached or is claiming/loading right now."""
        result: list[Collect] = []
        present: set[str] = set()
        for pod in pods:
            name = name_of(pod)
            present.add(name)
            if is_deleting(pod):
                continue
            if is_finished(pod):
                result.append(Collect(name, "finished"))
            elif annotation(pod, ANNOTATION_MODEL) not in self._wanted:
                result.append(Collect(name, "unknown_model"))
            elif name in owned:
                self._unowned_since.pop(name, None)
            elif now - self._unowned_since.setdefault(name, now) >= self._grace_s:
                result.append(Collect(name, "orphaned"))
        for name in set(self._unowned_since) - present:
            del self._unowned_since[name]
        return result
