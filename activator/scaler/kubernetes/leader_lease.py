"""Who is the scaling leader: the Lease record and the pure election policy (time passed in).

A `coordination.k8s.io/v1` Lease names its holder and when it last renewed. As client-go's
leader election does, expiry is judged by *this* activator's clock: a record counts as expired
once it has not changed for `leaseDurationSeconds` since this activator first saw it as it is
(remote timestamps are written, never trusted, so clock skew between nodes does not matter).

    no Lease ─▶ CREATE        holder is me ─▶ RENEW        released ("" holder) ─▶ ACQUIRE
    someone else's, unchanged for a lease duration ─▶ ACQUIRE          otherwise ─▶ FOLLOW

A leader whose renewals keep failing steps down `renew_deadline_s` after its last successful
one, before any other activator may take over (`renew_deadline_s` < the lease duration), so
two activators never both believe they lead. Times written are MicroTime (RFC 3339 with
microseconds), formatted here: kubernetes-asyncio's `LeaseLock` helper drops the fraction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from activator.scaler.kubernetes.pod_claim import utc_now_text

__all__ = [
    "ANNOTATION_PEER_URL",
    "LeaseAction",
    "LeaseObserver",
    "LeaseRecord",
    "lease_body",
    "renew_deadline_s",
    "retry_period_s",
]

ANNOTATION_PEER_URL = "thaw.dev/peer-url"  # where the holder takes peer reports


def renew_deadline_s(duration_s: float) -> float:
    """How long a leader keeps leading without a successful renewal (2/3 of the lease)."""
    return duration_s * 2 / 3


def retry_period_s(duration_s: float) -> float:
    """How often every activator looks at the Lease (an eighth of it, at least 0.1 s)."""
    return max(0.1, duration_s / 8)


class LeaseAction(StrEnum):
    CREATE = "create"
    RENEW = "renew"
    ACQUIRE = "acquire"
    FOLLOW = "follow"


@dataclass(frozen=True)
class LeaseRecord:
    """What a Lease says; `resource_version` is the precondition of the next write."""

    holder: str
    duration_s: int
    transitions: int
    renew_time: str | None
    acquire_time: str | None
    peer_url: str | None
    resource_version: str | None

    @classmethod
    def from_object(cls, lease: dict[str, Any]) -> LeaseRecord:
        spec = lease.get("spec") or {}
        meta = lease.get("metadata") or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            duration_s=int(spec.get("leaseDurationSeconds") or 0),
            transitions=int(spec.get("leaseTransitions") or 0),
            renew_time=spec.get("renewTime"),
            acquire_time=spec.get("acquireTime"),
            peer_url=(meta.get("annotations") or {}).get(ANNOTATION_PEER_URL),
            resource_version=meta.get("resourceVersion"),
        )


def lease_body(
    name: str,
    *,
    holder: str,
    duration_s: int,
    transitions: int,
    acquire_time: str | None,
    peer_url: str | None,
    resource_version: str | None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The Lease to write: renewed now (and acquired now when `acquire_time` is None)."""
    stamp = utc_now_text(now)
    meta: dict[str, Any] = {"name": name}
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    if peer_url is not None:
        meta["annotations"] = {ANNOTATION_PEER_URL: peer_url}
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": meta,
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration_s,
            "acquireTime": acquire_time or stamp,
            "renewTime": stamp,
            "leaseTransitions": transitions,
        },
    }


class LeaseObserver:
    """Remembers when this activator last saw the Lease change; decides what to do next."""

    def __init__(self, identity: str) -> None:
        self.identity = identity
        self.record: LeaseRecord | None = None
        self._seen_at: float | None = None
        self._key: tuple[object, ...] | None = None

    def observe(self, record: LeaseRecord | None, now: float) -> None:
        """The Lease as just read (None: there is none), at `now` (this activator's clock)."""
        key = None if record is None else (record.holder, record.renew_time, record.transitions)
        if key != self._key or self._seen_at is None:
            self._key, self._seen_at = key, now
        self.record = record

    def decide(self, now: float) -> LeaseAction:
        record = self.record
        if record is None:
            return LeaseAction.CREATE
        if record.holder == self.identity:
            return LeaseAction.RENEW
        seen_at = now if self._seen_at is None else self._seen_at
        if not record.holder or now - seen_at >= max(record.duration_s, 1):
            return LeaseAction.ACQUIRE
        return LeaseAction.FOLLOW
