"""Which replica each live sequence of a stateful model is bound to, under `thaw up`.

A stateful model (`sequence_batching`) keeps a sequence's state in the replica (and the
instance) that saw its START; every later request of the sequence must reach that replica.
The activator reads the request's `sequence_id` / `sequence_start` / `sequence_end` from its
JSON header (never its tensors), binds a sequence to the replica its first request went to,
and forgets it after its END has been answered or when it has been idle for the model's
`max_sequence_idle_microseconds` (the replica releases it then too). Replicas that hold live
sequences are never the ones drained when the model scales down, and the model does not scale
to zero while any sequence is live. Pure bookkeeping, time passed in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = ["SequenceKey", "SequenceRoutes", "sequence_key"]

SequenceId = int | str
_MAX_HEADER = 1 << 20  # a JSON header larger than this carries no routing we read


@dataclass(frozen=True, slots=True)
class SequenceKey:
    """What a request says about its sequence."""

    id: SequenceId
    start: bool
    end: bool


def sequence_key(body: bytes, header_length: str | None) -> SequenceKey | None:
    """The sequence a v2 infer body names (JSON, or the JSON header of a binary body), or
    None (no sequence, a raw body, or no readable header: the replica answers those)."""
    if header_length is not None:
        try:
            length = int(header_length)
        except ValueError:
            return None
        if length <= 0:
            return None  # a raw binary body: no parameters
        header = body[:length]
    else:
        header = body
    if len(header) > _MAX_HEADER:
        return None
    try:
        doc = json.loads(header)
    except (ValueError, RecursionError):
        return None
    params = doc.get("parameters") if isinstance(doc, dict) else None
    if not isinstance(params, dict):
        return None
    seq = params.get("sequence_id")
    if isinstance(seq, bool) or not isinstance(seq, int | str) or seq in (0, ""):
        return None  # no sequence, or a bad id the replica refuses in Triton's words
    start, end = params.get("sequence_start"), params.get("sequence_end")
    return SequenceKey(seq, start is True, end is True)


@dataclass(slots=True)
class _Bound:
    replica: str
    last_s: float
    in_flight: int = 0
    ended: bool = False


class SequenceRoutes:
    """The live sequences of one model and the replica each is bound to."""

    def __init__(self, *, idle_s: float) -> None:
        self._idle_s = idle_s
        self._bound: dict[SequenceId, _Bound] = {}

    def __len__(self) -> int:
        return len(self._bound)

    def __contains__(self, sequence: SequenceId) -> bool:
        """Whether `sequence` is live (begun, not ended, not forgotten as idle)."""
        return sequence in self._bound

    def replica_for(self, key: SequenceKey) -> str | None:
        """The replica a request of `key`'s sequence must go to (None: any). A START of a
        sequence still bound goes there too: that replica holds the sequence and begins it
        again in its slot (Triton: the earlier one ended early); begun on another, the old
        one would live on where it was, and a later request without START that reached it
        would continue it instead of being refused."""
        bound = self._bound.get(key.id)
        return None if bound is None else bound.replica

    def begin(self, key: SequenceKey, replica: str, now: float) -> None:
        """A request of the sequence goes to `replica` now."""
        bound = self._bound.get(key.id)
        if bound is None or bound.replica != replica or key.start:
            bound = self._bound[key.id] = _Bound(replica, now)
        bound.in_flight += 1
        bound.last_s = now

    def finish(self, key: SequenceKey, now: float) -> None:
        """Its answer is back; after the END answer the sequence is gone."""
        bound = self._bound.get(key.id)
        if bound is None:
            return
        bound.in_flight = max(0, bound.in_flight - 1)
        bound.last_s = now
        bound.ended = bound.ended or key.end
        if bound.ended and bound.in_flight == 0:
            del self._bound[key.id]

    def held_by(self, replica: str) -> int:
        """Live sequences bound to `replica`."""
        return sum(1 for bound in self._bound.values() if bound.replica == replica)

    def forget_replica(self, replica: str) -> None:
        """A replica died or was drained: its sequences' state is gone with it."""
        for seq in [s for s, b in self._bound.items() if b.replica == replica]:
            del self._bound[seq]

    def pinned(self, now: float) -> set[str]:
        """Replicas holding live sequences now (idle ones are forgotten first)."""
        idle = [
            seq
            for seq, bound in self._bound.items()
            if bound.in_flight == 0 and now - bound.last_s >= self._idle_s
        ]
        for seq in idle:
            del self._bound[seq]
        return {bound.replica for bound in self._bound.values()}
