"""Which instance and batch slot each live sequence of a stateful model holds (Triton's rules).

    route(id, start, now)      -> Assigned(instance, slot) | Backlogged | Refused
    finished(id, end, now)     -> sequences moved from the backlog into the freed slot
    expire(now)                -> sequences idle too long (released), and those moved in
    next_expiry()              -> when `expire` next has something to do

Every instance has `slots` batch slots (max_batch_size, or `max_candidate_sequences` for the
oldest strategy). A sequence takes a free slot with its START request and keeps it, so every
request of the sequence runs on that instance, in order, until its END request has executed;
the slot then goes to the oldest sequence in the backlog (sequences that started while every
slot was taken). A request that is no START and names no live sequence is refused (Triton's
text). A sequence with no request in flight for `idle_ns` since its latest request arrived (or
since it left the backlog) is released (Triton's reaper). The
lowest free slot index is taken first, on the instance with the fewest live sequences, so that
sequences spread over the instances. Pure bookkeeping: the caller passes the time.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["Assigned", "Backlogged", "Placement", "Refused", "SequenceId", "SequenceTable"]

SequenceId = int | str


@dataclass(frozen=True, slots=True)
class Assigned:
    """The request runs on `instance`, in batch slot `slot`."""

    instance: int
    slot: int


@dataclass(frozen=True, slots=True)
class Backlogged:
    """Every slot is taken: the request waits with its sequence for one to free up."""


@dataclass(frozen=True, slots=True)
class Refused:
    message: str


@dataclass(frozen=True, slots=True)
class Placement:
    """A backlogged sequence that has now got a slot."""

    sequence: SequenceId
    instance: int
    slot: int


@dataclass(slots=True)
class _Live:
    instance: int
    slot: int
    last_ns: int  # the latest request's arrival, or when it left the backlog
    in_flight: int = 0  # requests routed and not finished
    ended: bool = False  # its END finished while others were in flight (a client gone early)


@dataclass(slots=True)
class _Waiting:
    last_ns: int
    in_flight: int = 0


class SequenceTable:
    """The slots of one model version's instances and the sequences holding them."""

    def __init__(self, *, model: str, instances: int, slots: int, idle_ns: int) -> None:
        if instances < 1 or slots < 1:
            raise ValueError(f"instances = {instances}, slots = {slots}: each must be >= 1")
        self._model = model
        self._instances = instances
        self._idle_ns = idle_ns
        self._free: set[tuple[int, int]] = {(s, i) for i in range(instances) for s in range(slots)}
        self._live: dict[SequenceId, _Live] = {}
        self._backlog: OrderedDict[SequenceId, _Waiting] = OrderedDict()

    @property
    def live(self) -> int:
        """Sequences holding a slot or waiting in the backlog."""
        return len(self._live) + len(self._backlog)

    def holds(self, sequence: SequenceId) -> Assigned | None:
        live = self._live.get(sequence)
        return Assigned(live.instance, live.slot) if live is not None else None

    def route(
        self, sequence: SequenceId, *, start: bool, now_ns: int
    ) -> Assigned | Backlogged | Refused:
        """Where a new request of `sequence` goes (it counts as in flight until `finished`)."""
        live = self._live.get(sequence)
        waiting = self._backlog.get(sequence) if live is None else None
        if live is None and waiting is None:
            if not start:
                return Refused(
                    f"inference request for sequence {sequence} to model '{self._model}' must "
                    "specify the START flag on the first request of the sequence"
                )
            slot = self._take_slot()
            if slot is None:
                waiting = self._backlog[sequence] = _Waiting(now_ns)
            else:
                live = self._live[sequence] = _Live(slot[1], slot[0], now_ns)
        # A START on a live sequence continues it (Triton: the earlier one ended early).
        if live is not None and start:
            live.ended = False
        state = live if live is not None else waiting
        assert state is not None  # one of the two was found or made above
        state.last_ns = now_ns
        state.in_flight += 1
        return Assigned(live.instance, live.slot) if live is not None else Backlogged()

    def finished(self, sequence: SequenceId, *, end: bool, now_ns: int) -> list[Placement]:
        """A request of `sequence` finished executing (or failed); its END frees the slot."""
        live = self._live.get(sequence)
        if live is None:
            return []
        live.in_flight = max(0, live.in_flight - 1)
        live.ended = live.ended or end
        if live.ended and live.in_flight == 0:
            return self._release(sequence, now_ns)
        return []

    def cancel(self, sequence: SequenceId) -> None:
        """A sequence cancelled by a request of it that had not run: a backlogged one leaves the
        backlog; a live one ends, its slot freed once its requests in flight are finished."""
        if self._backlog.pop(sequence, None) is not None:
            return
        live = self._live.get(sequence)
        if live is not None:
            live.ended = True

    def expire(self, now_ns: int) -> tuple[list[SequenceId], list[Placement]]:
        """Release the sequences idle for `idle_ns` with nothing in flight."""
        idle = [
            sequence
            for sequence, live in self._live.items()
            if live.in_flight == 0 and now_ns - live.last_ns >= self._idle_ns
        ]
        placed: list[Placement] = []
        for sequence in idle:
            placed += self._release(sequence, now_ns)
        return idle, placed

    def next_expiry(self) -> int | None:
        """When the next live sequence with nothing in flight would become idle."""
        times = [live.last_ns + self._idle_ns for live in self._live.values() if not live.in_flight]
        return min(times, default=None)

    def _take_slot(self) -> tuple[int, int] | None:
        if not self._free:
            return None
        load = [0] * self._instances
        for live in self._live.values():
            load[live.instance] += 1
        slot = min(self._free, key=lambda si: (si[0], load[si[1]], si[1]))
        self._free.remove(slot)
        return slot

    def _release(self, sequence: SequenceId, now_ns: int) -> list[Placement]:
        """Free `sequence`'s slot for the oldest backlogged sequences, whose idle time counts
        from now: their wait in the backlog was their client waiting, not the sequence idle
        (Triton's reaper gives them 50 ms before it looks again; a client's next request
        comes later than that when its first one waited)."""
        live = self._live.pop(sequence)
        self._free.add((live.slot, live.instance))
        placed = []
        while self._backlog and self._free:
            waiting_id, waiting = self._backlog.popitem(last=False)
            slot = self._take_slot()
            assert slot is not None  # checked above
            self._live[waiting_id] = _Live(slot[1], slot[0], now_ns, waiting.in_flight)
            placed.append(Placement(waiting_id, slot[1], slot[0]))
        return placed
