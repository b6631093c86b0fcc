"""The pure batch planner: which pending requests one execution takes, or until when to wait.

    plan(pending, now_ns, policy) -> Take(items) | WaitUntil(deadline_ns)

The dispatcher (runtime.dispatcher) calls it on the event loop whenever an instance is free
and at least one request is pending, with `now_ns` from its injected clock (the clock that
stamped each request's `enqueued_ns`). A `Take` names the requests of one execution, oldest
first; the dispatcher hands exactly those to the free instance. A `WaitUntil` says that no
execution is due before `deadline_ns` (a dynamic batcher holding a batch open for more requests,
within its queue delay); the dispatcher plans again at that time, or sooner when a request
arrives or an instance frees up.

While every instance is busy the dispatcher may form batches ahead, for whichever instance frees
first; `lookahead(policy)` says how many (a batch formed early cannot take in later requests).

Today's one policy, `OneRequest`, takes the oldest request alone, so every execution is one
request in arrival order, and forms batches ahead without limit. Triton's dynamic batching
(max and preferred batch sizes, the queue delay, priority levels, queue policies) arrives as
further policy types handled here; nothing else has to change shape for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

__all__ = ["BatchPolicy", "OneRequest", "Pending", "Take", "WaitUntil", "lookahead", "plan"]


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


BatchPolicy = OneRequest  # the union of the policy types the planner knows


def plan(pending: Sequence[P], now_ns: int, policy: BatchPolicy) -> Take[P] | WaitUntil:
    """The next execution for `pending` (oldest first, never empty) at time `now_ns`."""
    if not pending:
        raise ValueError("plan() needs at least one pending request")
    # OneRequest: the oldest request, whatever the time or its size.
    return Take((pending[0],))


def lookahead(policy: BatchPolicy) -> int | None:
    """How many batches may be formed while every instance is busy (None: no limit)."""
    # OneRequest: a batch of one cannot grow by waiting, so each request becomes its batch at
    # once, and an instance that frees up takes the oldest without waiting for the loop.
    return None
