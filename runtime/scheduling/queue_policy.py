"""Triton's dynamic-batcher queue policies: priority levels, queue limits and request timeouts.

    admit(level sizes, request's priority and timeout, now, policies) -> Admitted | Refused
    expire(pending, now) -> Expiry(rejected, next_deadline_ns)

A request's priority picks its level (1 is the highest; 0 or a value past `priority_levels`
means `default_priority_level`, as Triton does). Each level has a `ModelQueuePolicy`: its own
from `priority_queue_policy`, else `default_queue_policy`. `max_queue_size` refuses a request
at once when that many wait at its level. `default_timeout_microseconds` gives every request a
deadline; with `allow_timeout_override` a request's `timeout` parameter may shorten it, never
lengthen it (and, as in Triton, it sets none where the level has no default timeout). At the
deadline a still-queued request is rejected (REJECT: 503 at that moment, not when an instance
frees up) or moved behind the level's other requests (DELAY). Pure: time is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from tritonconfig.schema import mc

__all__ = [
    "Admitted",
    "Expiry",
    "LevelPolicy",
    "QueuePolicies",
    "Queued",
    "Refused",
    "admit",
    "expire",
]

QUEUE_FULL = "Exceeds maximum queue size"  # Triton's texts
TIMED_OUT = "Request timeout expired"


@dataclass(frozen=True, slots=True)
class LevelPolicy:
    """One level's `ModelQueuePolicy`; 0 means no limit / no timeout."""

    max_queue_size: int = 0
    default_timeout_us: int = 0
    allow_timeout_override: bool = False
    delay_on_timeout: bool = False  # timeout_action DELAY (else REJECT)

    @classmethod
    def from_proto(cls, policy: mc.ModelQueuePolicy) -> LevelPolicy:
        return cls(
            max_queue_size=policy.max_queue_size,
            default_timeout_us=policy.default_timeout_microseconds,
            allow_timeout_override=policy.allow_timeout_override,
            delay_on_timeout=policy.timeout_action == mc.ModelQueuePolicy.DELAY,
        )

    def timeout_us(self, requested_us: int) -> int:
        """The timeout a request gets (0: none): the default, or a shorter one it asked for."""
        timeout = self.default_timeout_us
        if self.allow_timeout_override and 0 < requested_us < timeout:
            timeout = requested_us
        return timeout


@dataclass(frozen=True)
class QueuePolicies:
    """Every level's policy. `levels == 0`: one queue (level 0) under `default`."""

    levels: int = 0
    default_level: int = 0
    default: LevelPolicy = LevelPolicy()
    per_level: Mapping[int, LevelPolicy] = field(default_factory=dict)

    @classmethod
    def from_config(cls, batching: mc.ModelDynamicBatching) -> QueuePolicies:
        return cls(
            levels=batching.priority_levels,
            default_level=batching.default_priority_level if batching.priority_levels else 0,
            default=LevelPolicy.from_proto(batching.default_queue_policy),
            per_level={
                level: LevelPolicy.from_proto(policy)
                for level, policy in batching.priority_queue_policy.items()
            },
        )

    def level_of(self, priority: int) -> int:
        """The level a request with `priority` queues at (Triton: out of range -> default)."""
        if self.levels == 0:
            return 0
        return priority if 1 <= priority <= self.levels else self.default_level

    def policy(self, level: int) -> LevelPolicy:
        return self.per_level.get(level, self.default)

    @property
    def has_limits(self) -> bool:
        """Whether any level limits its queue size."""
        return any(p.max_queue_size for p in (self.default, *self.per_level.values()))

    @property
    def has_timeouts(self) -> bool:
        """Whether any level gives requests a deadline (else `expire` never finds any)."""
        return any(p.default_timeout_us for p in (self.default, *self.per_level.values()))


@dataclass(frozen=True, slots=True)
class Admitted:
    """Queue at `level`; `deadline_ns` 0 for none, else when it times out (`delay`: moved
    back instead of rejected)."""

    level: int
    deadline_ns: int
    delay: bool


@dataclass(frozen=True, slots=True)
class Refused:
    """Refused at once (503): the level's queue is full."""

    message: str


def admit(
    sizes: Mapping[int, int],
    *,
    priority: int,
    timeout_us: int,
    now_ns: int,
    policies: QueuePolicies,
) -> Admitted | Refused:
    """Where a new request queues and until when, or why it may not (`sizes`: requests
    waiting per level now)."""
    level = policies.level_of(priority)
    policy = policies.policy(level)
    if policy.max_queue_size and sizes.get(level, 0) >= policy.max_queue_size:
        return Refused(QUEUE_FULL)
    timeout = policy.timeout_us(timeout_us)
    deadline = now_ns + timeout * 1000 if timeout else 0
    return Admitted(level, deadline, policy.delay_on_timeout)


class Queued(Protocol):
    """What `expire` reads of a waiting request."""

    @property
    def deadline_ns(self) -> int: ...

    @property
    def delay_on_timeout(self) -> bool: ...


Q = TypeVar("Q", bound=Queued)


@dataclass(frozen=True, slots=True)
class Expiry(Generic[Q]):
    """Requests to reject now (timed out under REJECT), and the next deadline still ahead
    (0: none), when this must be asked again."""

    rejected: tuple[Q, ...]
    next_deadline_ns: int


def expire(pending: Sequence[Q], now_ns: int) -> Expiry[Q]:
    """The waiting requests whose REJECT deadline has come, and the next one to come."""
    rejected = []
    next_deadline = 0
    for item in pending:
        deadline = item.deadline_ns
        if not deadline or item.delay_on_timeout:
            continue
        if deadline <= now_ns:
            rejected.append(item)
        elif not next_deadline or deadline < next_deadline:
            next_deadline = deadline
    return Expiry(tuple(rejected), next_deadline)
