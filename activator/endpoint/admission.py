"""The request path of one model: a slot on a ready replica, or a place in its held queue.

`async with admission.acquire(nbytes) as replica:` takes a free slot (power of two choices
over the routable replicas) or joins the model's FIFO held queue, which a replica becoming
ready or a slot being freed drains, oldest first. Every request entering counts as traffic
(the autoscaler's idle clock) and as concurrency (the meter); a held one wakes the scaling
side (`Demand.wake`: the cold-start fast path).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Protocol

from activator.config import ScaleSettings
from activator.endpoint.balancer import pick
from activator.endpoint.cold_start import ColdStartTimer, release_cap
from activator.endpoint.concurrency import ConcurrencyMeter
from activator.endpoint.held_queue import HeldQueue, HeldRequest
from activator.endpoint.replica import Replica
from activator.endpoint.replica_lifecycle import ReplicaSet
from activator.errors import ActivationFailed, HeldTimeout
from activator.observe.metrics import Metrics

__all__ = ["Admission", "Demand", "Slot"]

logger = logging.getLogger(__name__)


class Demand(Protocol):
    """What admission tells the scaling side of its model."""

    def request_arrived(self, now: float) -> None:
        """A request entered (traffic: keeps a replica through the idle grace, and lets a
        start be retried after a failed one)."""
        ...

    def wake(self) -> None:
        """A request is held: decide now (at zero replicas this starts one)."""
        ...


class Slot:
    """The scope of `Admission.acquire`: one request's slot on a replica. A class, not a
    generator-based context manager, because every request enters one."""

    __slots__ = ("_admission", "_bound", "_loading", "_replica", "_size")

    def __init__(
        self,
        admission: Admission,
        size: int,
        bound: Replica | None = None,
        *,
        loading: bool = False,
    ) -> None:
        self._admission = admission
        self._size = size
        self._bound = bound
        self._loading = loading

    async def __aenter__(self) -> Replica:
        if self._bound is not None:
            self._replica = self._admission._admit_on(self._bound)
        else:
            self._replica = await self._admission._admit(self._size, loading=self._loading)
        return self._replica

    async def __aexit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self._admission._leave(self._replica, ok=exc_type is None)


class Admission:
    """Admission of one model's requests onto its replicas; `held` is its queue, which the
    reconciler reads too (held requests at zero make a start a cold start)."""

    def __init__(
        self,
        model: str,
        settings: ScaleSettings,
        held: HeldQueue[Replica],
        replicas: ReplicaSet,
        meter: ConcurrencyMeter,
        cold: ColdStartTimer,
        demand: Demand,
        metrics: Metrics,
        *,
        clock: Callable[[], float],
        rng: random.Random,
    ) -> None:
        self._model = model
        self._settings = settings
        self._replicas = replicas
        self._meter = meter
        self._cold = cold
        self._demand = demand
        self._metrics = metrics
        self._clock = clock
        self._rng = rng
        self._held = held
        self._closed = False
        self._publish()

    def acquire(self, size: int, *, loading: bool = False) -> Slot:
        """`async with admission.acquire(nbytes) as replica:` a slot on a ready replica.

        Waits in the held queue when no slot is free (503 Overloaded when it is full; 504
        HeldTimeout at the activation timeout; ActivationFailed when the wake-up failed). A
        start outlives its held requests' timeout: it goes on. `loading`: the repository
        load call, which waits as long as a start may take (`load_timeout_s`) instead.
        """
        return Slot(self, size, loading=loading)

    def acquire_on(self, replica: Replica) -> Slot:
        """`async with admission.acquire_on(replica) as replica:` a slot on that replica, at
        once, past its capacity if need be (a request bound to it: a live sequence)."""
        return Slot(self, 0, bound=replica)

    def _admit_on(self, replica: Replica) -> Replica:
        if self._closed:
            raise ActivationFailed(f"model '{self._model}': the activator is shutting down")
        now = self._clock()
        self._meter.change(now, +1)
        self._demand.request_arrived(now)
        if not replica.breaker.try_take():
            replica.breaker.take_anyway()
        return replica

    async def _admit(self, size: int, *, loading: bool) -> Replica:
        """Entering `acquire`: count the request, take a free slot or hold for one."""
        if self._closed:
            raise ActivationFailed(f"model '{self._model}': the activator is shutting down")
        now = self._clock()
        self._meter.change(now, +1)
        self._demand.request_arrived(now)
        # Fast path: nothing is waiting and a replica has a free slot (no queue, no await).
        replica = None if len(self._held) else self._take_free()
        if replica is None:
            try:
                replica = await self._hold(size, loading=loading)
            except BaseException:
                self._meter.change(self._clock(), -1)
                raise
        return replica

    def _leave(self, replica: Replica, *, ok: bool) -> None:
        """Leaving `acquire`: free the slot for the oldest held request (if any)."""
        try:
            replica.breaker.release()
            if replica.in_flight == 0:
                replica.idle.set()
            if ok and replica.cold_start_t0 is not None:
                self._cold.served(replica)
            if len(self._held):  # nothing else changed when nobody waits: no dispatch
                self.dispatch()
        finally:
            self._meter.change(self._clock(), -1)

    def _take_free(self, cap: int | None = None) -> Replica | None:
        """A slot on a replica (power of two choices), on one with fewer than `cap` requests
        in flight when given; None when there is none."""
        replicas = self._replicas.replicas
        if cap is not None:
            replicas = [r for r in replicas if r.in_flight < cap]
        replica = pick(replicas, self._rng)
        if replica is not None and replica.breaker.try_take():
            return replica
        return None

    async def _hold(self, size: int, *, loading: bool) -> Replica:
        now = self._clock()
        settings = self._settings
        wait_s = settings.start_timeout_s if loading else settings.activation_timeout_s
        future: asyncio.Future[Replica] = asyncio.get_running_loop().create_future()
        item = HeldRequest(size, now + wait_s, now, future)
        self._held.push(item)
        self._demand.wake()
        self.dispatch()
        try:
            await self._wait_held(future, now + wait_s)
        except asyncio.CancelledError:
            # The client went away while held: never forward it; give back a granted slot.
            self._held.remove(item)
            if future.done() and not future.cancelled() and future.exception() is None:
                future.result().breaker.release()
                self.dispatch()
            future.cancel()
            raise
        finally:
            self._held.remove(item)
            self._publish()
        if not future.done():
            future.cancel()
            raise self._held_timeout(wait_s, loading=loading)
        return future.result()

    async def _wait_held(self, future: asyncio.Future[Replica], deadline: float) -> None:
        """Wait for a slot until `deadline`, or later while a start waits or waited for a node
        to be provisioned (the backend's `hold_until`): a cluster that is adding a node for
        the model is no reason to fail its requests at the activation timeout."""
        while True:
            await asyncio.wait({future}, timeout=max(0.0, deadline - self._clock()))
            if future.done():
                return
            later = self._replicas.hold_until()
            if later is None or later <= self._clock():
                return
            deadline = later

    def _held_timeout(self, wait_s: float, *, loading: bool) -> HeldTimeout:
        waited = f"{wait_s:g} s ({'load_timeout_s' if loading else 'activation_timeout_s'})"
        if self._replicas.serving():
            return HeldTimeout(f"request for model '{self._model}' waited {waited} for a free slot")
        error = self._replicas.last_error
        why = f"; last error: {error}" if error else ""
        if self._replicas.starting and not loading:
            # The start is bounded by its own limit, not this request's: say so, so that the
            # client knows a retry may find the model up.
            limit = f"{self._settings.start_timeout_s:g} s"
            why += f"; its start goes on (it may take up to {limit}, load_timeout_s)"
        return HeldTimeout(f"model '{self._model}' did not become ready within {waited}{why}")

    def dispatch(self) -> None:
        """Hand free slots to held requests, oldest first (`cold_start.release_cap` per
        replica: a backlog is spread over the replicas as they come up)."""
        while len(self._held):
            replica = self._take_free(self._release_cap())
            if replica is None:
                break
            item = self._held.pop()
            if item is None:
                replica.breaker.release()
                break
            item.future.set_result(replica)
        self._publish()

    def _release_cap(self) -> int | None:
        oldest = self._held.oldest()
        if oldest is None:
            return None
        now = self._clock()
        return release_cap(
            container_concurrency=self._settings.container_concurrency,
            target_concurrency=self._settings.target_concurrency,
            waited_s=now - oldest.enqueued_at,
            wait_s=oldest.deadline - oldest.enqueued_at,
        )

    def fail_held(self, error: Exception) -> None:
        """Fail every held request with `error` (the wake-up failed; shutting down)."""
        for item in self._held.drain():
            if not item.future.done():
                item.future.set_exception(error)
        self._publish()

    def close(self) -> None:
        """Refuse new requests and fail the held ones: the activator is shutting down."""
        self._closed = True
        self.fail_held(ActivationFailed(f"model '{self._model}': the activator is shutting down"))

    def _publish(self) -> None:
        self._metrics.held.labels(self._model).set(len(self._held))
