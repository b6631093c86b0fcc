"""A follower's replica start as one loop: look for a pod it can attach, else ask
`follower_start.step` whether to wait for the leader, withdraw or fail, and wait for the pod
cache to change (or the poll) before looking again.

Both kinds of start run it: a dedicated model's (a pod the leader claims for the model) and a
shared model's (a shared pod whose booking lists it, decision 0022). What differs is passed
in: how to find and attach a pod, how many the leader is bringing up, how often to poll.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from activator.errors import ActivationFailed, StartWithdrawn
from activator.scaler.backend import ReplicaHandle
from activator.scaler.kubernetes.follower_start import FollowAction
from activator.scaler.kubernetes.follower_start import step as follow_step
from activator.scaler.kubernetes.pod_informer import PodInformer

__all__ = ["FollowerLook", "follow"]


@dataclass(frozen=True)
class FollowerLook:
    """What one follower's start looks at on each pass (see `follower_start.step`).

    `find` attaches a pod that serves the model, if any; `claimed` counts the pods the leader
    is bringing up for it; `poll_s(elapsed, claimed)` is the longest wait before the next
    look; `failure` is the error's text; with `hard_deadline`, the start fails at its
    deadline even while the leader's pods are on their way."""

    find: Callable[[], Awaitable[ReplicaHandle | None]]
    claimed: Callable[[], int]
    demand: Callable[[], int]
    attached: Callable[[], int]
    role_changed: Callable[[], bool]
    poll_s: Callable[[float, int], float]
    failure: Callable[[], str]
    hard_deadline: bool = False


async def follow(
    pods: PodInformer,
    look: FollowerLook,
    *,
    model: str,
    start: float,
    deadline: float,
    clock: Callable[[], float],
) -> ReplicaHandle:
    """The replica a follower's start of `model` ends with; `StartWithdrawn` or
    `ActivationFailed` as `follower_start.step` decides."""
    while True:
        seen = pods.version
        handle = await look.find()
        if handle is not None:
            return handle
        now = clock()
        claimed = look.claimed()
        decided = follow_step(
            role_changed=look.role_changed(),
            claimed=claimed,
            demand=look.demand(),
            attached=look.attached(),
            now=now,
            deadline=deadline,
        )
        if decided.action is FollowAction.WITHDRAW:
            raise StartWithdrawn(f"start of model '{model}' withdrawn: {decided.reason}")
        if decided.action is FollowAction.FAIL or (look.hard_deadline and now >= deadline):
            raise ActivationFailed(look.failure())
        await pods.wait_change(seen, look.poll_s(now - start, claimed))
