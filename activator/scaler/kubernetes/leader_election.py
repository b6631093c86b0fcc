"""The scaling leader's Lease, kept: read it every retry period, then create, renew or take it.

One activator of a fleet leads (it claims and deletes pods and scales on the total concurrency
every activator reports); the others follow (they hold and route requests and report). The
policy is `leader_lease`'s; this loop does the I/O. Every write carries the resourceVersion it
read, so of two activators taking an expired Lease at once one wins and the other gets 409
and follows. `on_change(leading)` is called on every change of role; `release()` on shutdown
hands the Lease over at once (holder "") instead of after a lease duration.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from activator.scaler.kubernetes.api import KubeApi, KubeApiError
from activator.scaler.kubernetes.leader_lease import (
    LeaseAction,
    LeaseObserver,
    LeaseRecord,
    lease_body,
    renew_deadline_s,
    retry_period_s,
)

__all__ = ["LeaderElection"]

logger = logging.getLogger(__name__)


# Writes of a release that meet a renewal of our own still in flight (409), read again each time.
_RELEASE_ATTEMPTS = 3


class LeaderElection:
    """This activator's part in electing the scaling leader through the Lease `name`."""

    def __init__(
        self,
        api: KubeApi,
        name: str,
        identity: str,
        *,
        duration_s: int,
        peer_url: str | None,
        on_change: Callable[[bool], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.identity = identity
        self.leading = False
        self.became_leader_at: float | None = None  # clock time of the last change to leader
        self._api = api
        self._duration_s = duration_s
        self._peer_url = peer_url
        self._on_change = on_change
        self._clock = clock
        self._observer = LeaseObserver(identity)
        self._last_renewal: float | None = None  # clock time of the last successful write
        self._released = False  # after release(): never leads again (shutting down)
        self._wake = asyncio.Event()

    @property
    def leader_url(self) -> str | None:
        """Where the current holder takes peer reports (None: no holder, or it is us)."""
        record = self._observer.record
        if record is None or not record.holder or record.holder == self.identity:
            return None
        return record.peer_url

    @property
    def holder(self) -> str | None:
        record = self._observer.record
        return record.holder if record is not None and record.holder else None

    async def run(self) -> None:
        period = retry_period_s(self._duration_s)
        while True:
            try:
                await self._step()
            except KubeApiError as exc:
                logger.warning("leader lease %s: %s", self.name, exc.message)
            self._check_deadline()
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(period):
                    await self._wake.wait()

    async def _step(self) -> None:
        lease = await self._api.read_lease(self.name)
        record = LeaseRecord.from_object(lease) if lease is not None else None
        now = self._clock()
        self._observer.observe(record, now)
        action = self._observer.decide(now)
        if action is LeaseAction.FOLLOW or self._released:
            self._set(False)
            return
        transitions = 0 if record is None else record.transitions
        body = lease_body(
            self.name,
            holder=self.identity,
            duration_s=self._duration_s,
            transitions=transitions + (1 if action is LeaseAction.ACQUIRE and record else 0),
            acquire_time=record.acquire_time if action is LeaseAction.RENEW and record else None,
            peer_url=self._peer_url,
            resource_version=None if record is None else record.resource_version,
        )
        try:
            if action is LeaseAction.CREATE:
                written = await self._api.create_lease(body)
            else:
                written = await self._api.replace_lease(self.name, body)
        except KubeApiError as exc:
            if exc.status == 409:  # another activator wrote it first: it leads; look again now
                self._wake.set()
                self._set(False)
                return
            raise
        self._observer.observe(LeaseRecord.from_object(written), self._clock())
        self._last_renewal = now
        if self._released:
            # Released while this write was in flight (shutdown): `release` gives up the
            # version written here too; leading again now would have this activator act as
            # leader (re-check bookings, collect pods) while it stops.
            return
        if action is not LeaseAction.RENEW:
            logger.info("leader lease %s: %s leads now (%s)", self.name, self.identity, action)
        self._set(True)

    def _check_deadline(self) -> None:
        """A leader that could not renew in time steps down before anyone may take over."""
        if not self.leading or self._last_renewal is None:
            return
        if self._clock() - self._last_renewal > renew_deadline_s(self._duration_s):
            logger.warning("leader lease %s: renewals failing, stepping down", self.name)
            self._set(False)

    def _set(self, leading: bool) -> None:
        if leading == self.leading:
            return
        self.leading = leading
        if leading:
            self.became_leader_at = self._clock()
        self._on_change(leading)

    async def release(self) -> None:
        """Give the Lease up (shutdown): the next activator need not wait for it to expire.

        A renewal in flight when this is called may write the Lease after the record this
        starts from: that write's 409 is answered by reading the Lease again and, while it is
        still ours, releasing that version (a few times at most)."""
        self._released = True
        record = self._observer.record
        if not self.leading or record is None:
            return
        self._set(False)
        for _ in range(_RELEASE_ATTEMPTS):
            body = lease_body(
                self.name,
                holder="",
                duration_s=1,
                transitions=record.transitions,
                acquire_time=record.acquire_time,
                peer_url=None,
                resource_version=record.resource_version,
            )
            try:
                await self._api.replace_lease(self.name, body)
                return
            except KubeApiError as exc:
                if exc.status != 409:
                    logger.warning("leader lease %s: release failed: %s", self.name, exc.message)
                    return
            try:
                lease = await self._api.read_lease(self.name)
            except KubeApiError as exc:
                logger.warning("leader lease %s: release failed: %s", self.name, exc.message)
                return
            record = LeaseRecord.from_object(lease) if lease is not None else None
            if record is None or record.holder != self.identity:
                return  # another activator holds it already: nothing of ours to give up
        logger.warning("leader lease %s: release failed: the Lease kept changing", self.name)
