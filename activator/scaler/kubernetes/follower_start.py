"""What a follower's replica start does while the model has no pod it can attach: pure.

On a follower a start is not a bring-up: it is a *request to the scaling leader* for a pod of
the model, satisfied by any pod the leader claimed for it. Each time the pod cache, the
role or the demand changes (and at least every poll), the follower's start asks `step`:

    became the scaling leader ─▶ WITHDRAW   (it decides again as leader, from its own data)
    a pod of the model is claimed, loading ─▶ WAIT   (even past the deadline: the leader's
                                                      bring-up has its own)
    no request waits for the model anywhere ─▶ WITHDRAW   (an orphan: nothing to start for)
    past the deadline, already routing to a pod of the model ─▶ WITHDRAW   (satisfied)
    past the deadline ─▶ FAIL   (requests wait and the leader started nothing)
    otherwise ─▶ WAIT

A withdrawn start fails no request: the endpoint decides again (and, once a start was
withdrawn, only waiting requests start another). Issue 21, defect 2: before this, a start
that nothing cancelled ran to its deadline and failed the requests held here, or, once this
activator led, brought up a pod for an idle model.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["FOLLOW_POLL_S", "FollowAction", "FollowStep", "poll_s", "step"]


FOLLOW_POLL_S = 0.1  # a follower waiting for the leader's pod also looks at its role this often


def poll_s(elapsed: float, loading: int) -> float:
    """Seconds until a follower's start looks again, `elapsed` into it with `loading` of the
    leader's pods of the model still loading: while one loads, often at first (a small model
    loads in tens of ms), then less (a big one takes seconds), at most every 0.25 s."""
    if not loading:
        return FOLLOW_POLL_S
    return min(FOLLOW_POLL_S * 2.5, max(0.01, elapsed / 8))


class FollowAction(StrEnum):
    WAIT = "wait"
    WITHDRAW = "withdraw"
    FAIL = "fail"


@dataclass(frozen=True)
class FollowStep:
    """The action and, for WITHDRAW and FAIL, why (for the log and the error)."""

    action: FollowAction
    reason: str = ""


def step(
    *,
    role_changed: bool,
    claimed: int,
    demand: int,
    attached: int,
    now: float,
    deadline: float,
) -> FollowStep:
    """One look at a follower's start of a model.

    `role_changed`: this activator's role changed since the start began (it leads now, or
    led and follows again); `claimed`: pods of the model claimed or created by the leader
    and still loading; `demand`: requests for the model held or in flight here or, by the
    leader's last answer, anywhere; `attached`: pods of the model this activator routes to.
    """
    if role_changed:
        return FollowStep(FollowAction.WITHDRAW, "this activator's scaling role changed")
    if claimed:
        return FollowStep(FollowAction.WAIT)
    if demand <= 0:
        return FollowStep(FollowAction.WITHDRAW, "no request waits for the model any more")
    if now < deadline:
        return FollowStep(FollowAction.WAIT)
    if attached:
        return FollowStep(
            FollowAction.WITHDRAW, "this activator already routes to every pod of the model"
        )
    return FollowStep(FollowAction.FAIL, "the scaling leader did not start one")
