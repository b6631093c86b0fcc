"""What a replica stream of a stateful model carried, for the model's sequence routes.

    StreamSequences(endpoint, replica, in_order)
        .sent(key | None)   a request went on the stream (None: one of no sequence)
        .answered()         an answer came back
        .close()            the stream is over

A gRPC stream through the activator (activator.surfaces.grpc_stream_relay) may carry requests of
many sequences to one replica. Each is reported to the routes as it goes
(`ModelEndpoint.sequence_sent`) and as it is answered (`sequence_answered`), so that a later
request of the sequence, on any stream or protocol, finds its replica, and a replica holding a
live one is not drained. Answers are opaque bytes here: a model that answers one per request in
request order (not decoupled) pairs each answer with its request; any other model's requests
count as answered when the stream ends, kept meanwhile as a count per sequence since its latest
START. Pure bookkeeping.
"""

from __future__ import annotations

import collections
from typing import Protocol

from activator.endpoint.sequence_routes import SequenceId, SequenceKey
from activator.fleet.repository import ModelEntry

__all__ = ["SequenceReports", "StreamSequences", "answers_in_order"]


class SequenceReports(Protocol):
    """What a ModelEndpoint is told of a stream's sequences."""

    def sequence_sent(self, sequence: SequenceKey, replica_id: str) -> None: ...

    def sequence_answered(self, sequence: SequenceKey) -> None: ...


def answers_in_order(entry: ModelEntry) -> bool:
    """Whether a replica answers a stream's requests of this model one each, in request order
    (not decoupled; a config the replica completes itself might be)."""
    return not entry.replica_completes and not entry.config.model_transaction_policy.decoupled


class StreamSequences:
    """A replica stream's requests of a stateful model's sequences, reported to the model's
    sequence routes as they go and as they are answered. A model that answers in request
    order: each answer is its request's. Any other (decoupled): its requests count as
    answered when the stream ends, kept as a count per sequence since its latest START."""

    def __init__(self, endpoint: SequenceReports, replica: str, in_order: bool) -> None:
        self._endpoint = endpoint
        self._replica = replica
        self._in_order = in_order
        self._waiting: collections.deque[SequenceKey | None] = collections.deque()
        self._since_start: dict[SequenceId, tuple[int, SequenceKey]] = {}

    def sent(self, sequence: SequenceKey | None) -> None:
        if sequence is not None:
            self._endpoint.sequence_sent(sequence, self._replica)
        if self._in_order:
            self._waiting.append(sequence)  # every request: answers pair with them in order
        elif sequence is not None:
            count = 0 if sequence.start else self._since_start.get(sequence.id, (0, sequence))[0]
            self._since_start[sequence.id] = (count + 1, sequence)

    def answered(self) -> None:
        """One answer came back (of the oldest request not answered, in order)."""
        if self._in_order and self._waiting:
            sequence = self._waiting.popleft()
            if sequence is not None:
                self._endpoint.sequence_answered(sequence)

    def close(self) -> None:
        """The stream is over: what was not answered counts as answered now (a sequence that
        did not end stays bound to the replica until idle)."""
        waiting, self._waiting = self._waiting, collections.deque()
        for sequence in waiting:
            if sequence is not None:
                self._endpoint.sequence_answered(sequence)
        since, self._since_start = self._since_start, {}
        for count, last in since.values():
            for _ in range(count - 1):
                self._endpoint.sequence_answered(SequenceKey(last.id, False, False))
            self._endpoint.sequence_answered(last)
