"""activator.surfaces.stream_sequences: what a replica stream carried of a stateful model's
sequences reaches the model's sequence routes, so a later request finds the replica and a
sequence that ended is forgotten."""

from __future__ import annotations

from activator.endpoint.sequence_routes import SequenceKey, SequenceRoutes
from activator.surfaces.stream_sequences import StreamSequences


class _Endpoint:
    """ModelEndpoint's two reports, onto real routes at a fixed time."""

    def __init__(self) -> None:
        self.routes = SequenceRoutes(idle_s=5.0)

    def sequence_sent(self, sequence: SequenceKey, replica_id: str) -> None:
        self.routes.begin(sequence, replica_id, 0.0)

    def sequence_answered(self, sequence: SequenceKey) -> None:
        self.routes.finish(sequence, 0.0)


def _key(seq: int, *, start: bool = False, end: bool = False) -> SequenceKey:
    return SequenceKey(seq, start, end)


def test_in_order_answers_end_a_sequence_when_its_end_is_answered() -> None:
    endpoint = _Endpoint()
    sent = StreamSequences(endpoint, "r1", in_order=True)
    for key in (_key(1, start=True), None, _key(1), _key(1, end=True)):
        sent.sent(key)
    assert endpoint.routes.replica_for(_key(1)) == "r1"
    for _ in range(3):  # START, the request of no sequence, the middle one
        sent.answered()
    assert endpoint.routes.pinned(1.0) == {"r1"}  # its END is not answered yet
    sent.answered()
    assert len(endpoint.routes) == 0 and endpoint.routes.pinned(1.0) == set()
    sent.close()
    assert len(endpoint.routes) == 0


def test_a_sequence_that_did_not_end_stays_bound_after_the_stream() -> None:
    endpoint = _Endpoint()
    sent = StreamSequences(endpoint, "r2", in_order=True)
    sent.sent(_key(7, start=True))
    sent.sent(_key(7))
    sent.close()  # the stream ended with both unanswered (cancelled)
    assert endpoint.routes.replica_for(_key(7)) == "r2"  # until idle, as a REST one
    assert endpoint.routes.pinned(1.0) == {"r2"}
    assert endpoint.routes.pinned(10.0) == set()  # idle past 5 s: forgotten


def test_out_of_order_answers_count_at_the_end_from_the_latest_start() -> None:
    endpoint = _Endpoint()
    sent = StreamSequences(endpoint, "r1", in_order=False)
    # Two sequences on one id, back to back (the second START begins it again), then one
    # that does not end.
    for key in (_key(3, start=True), _key(3, end=True), _key(3, start=True), _key(3)):
        sent.sent(key)
    sent.sent(_key(4, start=True))
    sent.sent(_key(4, end=True))
    for _ in range(6):
        sent.answered()  # a decoupled model's answers pair with nothing: no change
    assert endpoint.routes.pinned(1.0) == {"r1"} and len(endpoint.routes) == 2
    sent.close()
    assert endpoint.routes.replica_for(_key(3)) == "r1"  # the second one lives on
    assert endpoint.routes.replica_for(_key(4)) is None  # ended
    assert endpoint.routes.pinned(10.0) == set()  # and idle in time
