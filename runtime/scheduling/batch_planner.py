"""The pure batch planner: which pending requests one execution takes, or until when to wait.

    plan(pending, now_ns, policy) -> Take(items) | WaitUntil(deadline_ns)

The dispatcher (runtime.scheduling.dispatcher) calls it on the event loop whenever an instance is
free and at least one request is pending, with `now_ns` from its injected clock (the clock that
stamped each request's `enqueued_ns`). A `Take` names the requests of one execution, oldest
first; the dispatcher hands exactly those to the free instance. A `WaitUntil` says that no
execution is due before `deadline_ns` (a dynamic batcher holding a batch open for more requests,
within its queue delay); the dispatcher plans again at that time, or sooner when a request
arrives or an instance frees up.

While every instance is busy the dispatcher may form batches ahead, for whichever instance frees
first; `lookahead(policy)` says how many (a batch formed early cannot take in later requests).

Two policies. `OneRequest` (a model without `dynamic_batching`) takes the oldest request alone
and forms batches ahead without limit. `DynamicBatching` is Triton's dynamic batcher (core
`DynamicBatchScheduler::GetDynamicBatch`), in its stages:

    order      higher priority levels first; in a level, arrival order, timed-out DELAY
               requests last
    gather     from the first, while the batch stays <= max_batch_size and every request has
               the first one's shape key (its variable-size, non-ragged input shapes)
    preferred  the largest preferred batch size reached on the way (or the batch before the
               next request would pass the largest preferred size)
    decide     a preferred size reached and the oldest request within its queue delay: take
               that; the batch full, cut short by a request that does not fit, at least the
               largest preferred size, or no delay (left): take it all; else wait until the
               oldest request has waited `max_queue_delay` (a lone request at idle waits that
               long at most, never for more traffic).

A stateful model's requests are planned per instance (runtime.scheduling.sequence_scheduler), at
most one request of a sequence per execution: `SequenceSlots` (Triton's direct strategy: one
request per batch slot, slots in order) and `OldestSequences` (the oldest strategy: the dynamic
batcher over the oldest request of each sequence).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Generic, Protocol, TypeVar

from tritonconfig.schema import mc

__all__ = [
    "BatchPolicy",
    "DynamicBatching",
    "OldestSequences",
    "OneRequest",
    "Pending",
    "SequenceSlots",
    "Take",
    "WaitUntil",
    "lookahead",
    "plan",
]


class Pending(Protocol):
    """What the planner reads of one pending request."""

    @property
    def batch_size(self) -> int:
        """Inferences in the request (its batch dimension, or 1)."""
        ...

    @property
    def enqueued_ns(self) -> int:
        """When it was queued, in nanoseconds on the dispatcher's clock."""
        ...

    @property
    def level(self) -> int:
        """Its priority level (runtime.scheduling.queue_policy; 1 is the highest, 0 when none)."""
        ...

    @property
    def deadline_ns(self) -> int:
        """When its queue timeout expires (0: never)."""
        ...

    @property
    def delay_on_timeout(self) -> bool:
        """Whether an expired timeout moves it behind its level (DELAY) instead of failing it."""
        ...

    @property
    def shape_key(self) -> Hashable:
        """Requests batch together only when their keys are equal (their variable shapes)."""
        ...

    @property
    def sequence(self) -> Hashable:
        """The sequence (batch slot, or sequence id) of a stateful model's request; None."""
        ...


P = TypeVar("P", bound=Pending)


@dataclass(frozen=True, slots=True)
class Take(Generic[P]):
    """Execute these pending requests together, now, on one free instance (oldest first)."""

    items: tuple[P, ...]

    def __post_init__(self) -> None:
        if not self.items:
            raise ValueError("a Take needs at least one request")


@dataclass(frozen=True, slots=True)
class WaitUntil:
    """Nothing is due yet: plan again at `deadline_ns` (the dispatcher's clock) at the latest."""

    deadline_ns: int


@dataclass(frozen=True, slots=True)
class OneRequest:
    """Every execution is the oldest pending request alone: no dynamic batching."""


@dataclass(frozen=True, slots=True)
class DynamicBatching:
    """Triton's `dynamic_batching`: batches of at most `max_batch_size` inferences, aiming at
    `preferred` sizes, a request held at most `max_queue_delay_ns` for company."""

    max_batch_size: int = 1
    preferred: frozenset[int] = frozenset()
    max_queue_delay_ns: int = 0
    prioritized: bool = False  # several priority levels, or DELAY timeouts: order each plan

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ValueError(f"`max_batch_size` = {self.max_batch_size}, must be >= 1")

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> DynamicBatching:
        """The policy of a config with `dynamic_batching` (after tritonconfig's defaults)."""
        batching = config.dynamic_batching
        policies = [batching.default_queue_policy, *batching.priority_queue_policy.values()]
        delays = any(
            p.timeout_action == mc.ModelQueuePolicy.DELAY and p.default_timeout_microseconds
            for p in policies
        )
        return cls(
            # Without batching (max_batch_size 0) every request is a batch of its own.
            max_batch_size=max(1, config.max_batch_size),
            preferred=frozenset(batching.preferred_batch_size),
            max_queue_delay_ns=batching.max_queue_delay_microseconds * 1000,
            prioritized=batching.priority_levels > 1 or delays,
        )

    @property
    def max_preferred(self) -> int:
        """The largest preferred size (0 when none: every batch goes at once)."""
        return max(self.preferred, default=0)


@dataclass(frozen=True, slots=True)
class SequenceSlots:
    """Triton's direct sequence strategy on one instance: each execution takes the oldest
    request of every batch slot that has one (`sequence` is the slot), in slot order. With a
    `min_utilization`, fewer ready slots wait up to `max_queue_delay_ns` for more."""

    slots: int
    max_queue_delay_ns: int = 0
    min_utilization: float = 0.0


@dataclass(frozen=True, slots=True)
class OldestSequences:
    """Triton's oldest sequence strategy on one instance: the dynamic batcher over the oldest
    request of each sequence (`sequence` is its id)."""

    batching: DynamicBatching


# The policy types the planner knows.
BatchPolicy = OneRequest | DynamicBatching | SequenceSlots | OldestSequences


def plan(pending: Sequence[P], now_ns: int, policy: BatchPolicy) -> Take[P] | WaitUntil:
    """The next execution for `pending` (oldest first, never empty) at time `now_ns`."""
    if not pending:
        raise ValueError("plan() needs at least one pending request")
    if isinstance(policy, OneRequest):
        # The oldest request, whatever the time or its size.
        return Take((pending[0],))
    if isinstance(policy, DynamicBatching):
        if not policy.prioritized:
            return _dynamic(pending, now_ns, policy)
        decision = _dynamic(_ordered(pending, now_ns), now_ns, policy)
        reorder = _next_delay_timeout(pending, now_ns)
        if isinstance(decision, WaitUntil) and reorder and reorder < decision.deadline_ns:
            # A DELAY timeout moves its request behind its level: plan again then, as the
            # batch it leaves may reach a preferred size (Triton's timed-out requests).
            return WaitUntil(reorder)
        return decision
    firsts = _first_of_each_sequence(pending)
    if isinstance(policy, OldestSequences):
        return _dynamic(firsts, now_ns, policy.batching)
    oldest = min(item.enqueued_ns for item in firsts)
    short = len(firsts) < policy.min_utilization * policy.slots
    if short and now_ns - oldest < policy.max_queue_delay_ns:
        return WaitUntil(oldest + policy.max_queue_delay_ns)
    return Take(tuple(sorted(firsts, key=lambda item: item.sequence)))  # type: ignore[arg-type, return-value]


def _first_of_each_sequence(pending: Sequence[P]) -> list[P]:
    """The oldest pending request of each sequence, in arrival order."""
    seen: set[Hashable] = set()
    firsts = []
    for item in pending:
        if item.sequence not in seen:
            seen.add(item.sequence)
            firsts.append(item)
    return firsts


def _next_delay_timeout(pending: Sequence[P], now_ns: int) -> int:
    """The earliest DELAY deadline still to come among `pending` (0: none)."""
    upcoming = [
        item.deadline_ns for item in pending if item.delay_on_timeout and item.deadline_ns > now_ns
    ]
    return min(upcoming, default=0)


def _ordered(pending: Sequence[P], now_ns: int) -> list[P]:
    """Levels in priority order (1 first); in each, arrival order with expired DELAY last."""

    def key(item: P) -> tuple[int, bool]:
        delayed = item.delay_on_timeout and 0 < item.deadline_ns <= now_ns
        return (item.level, delayed)

    return sorted(pending, key=key)  # stable: arrival order within each key


def _dynamic(candidates: Sequence[P], now_ns: int, policy: DynamicBatching) -> Take[P] | WaitUntil:
    """Gather -> preferred -> decide, over candidates in the order they may be taken."""
    max_preferred = policy.max_preferred
    first = candidates[0]
    batch: list[P] = [first]
    size = first.batch_size
    best = len(batch) if size in policy.preferred else 0
    oldest = first.enqueued_ns
    cut_short = False
    for item in islice(candidates, 1, None):  # a deque: no slicing
        grown = size + item.batch_size
        if grown > max_preferred and best == 0:
            best = len(batch)  # the batch before it passes the largest preferred size
        if grown > policy.max_batch_size or item.shape_key != first.shape_key:
            cut_short = True
            break
        batch.append(item)
        size = grown
        oldest = min(oldest, item.enqueued_ns)
        if size in policy.preferred:
            best = len(batch)
    delay = policy.max_queue_delay_ns
    delay_over = delay != 0 and now_ns - oldest >= delay
    if best and not delay_over:
        return Take(tuple(batch[:best]))
    if cut_short or size >= max_preferred or delay == 0 or delay_over:
        return Take(tuple(batch))
    return WaitUntil(oldest + delay)


def lookahead(policy: BatchPolicy) -> int | None:
    """How many batches may be formed while every instance is busy (None: no limit)."""
    if isinstance(policy, OneRequest):
        # A batch of one cannot grow by waiting, so each request becomes its batch at once,
        # and an instance that frees up takes the oldest without waiting for the loop.
        return None
    # A dynamic batch grows while it waits: form one only for an instance that can run it
    # (and a sequence's next request must not be planned before its previous one ran).
    return 0
