"""benchmarks/slow_clients.py's windows: the slowest normal request in flight while the slow
connections opened, and while the server closed them (issue 26's "keep")."""

from __future__ import annotations

import math

from tests.fixtures.slow_clients import LatencyProbe


def _probe(requests: list[tuple[float, float]]) -> LatencyProbe:
    probe = LatencyProbe("127.0.0.1", 1, "/")
    probe.started_at = [at for at, _ in requests]
    probe.latencies_ms = [ms for _, ms in requests]
    return probe


def test_a_request_counts_in_every_window_it_was_in_flight_during() -> None:
    probe = _probe([(0.0, 5.0), (1.0, 300.0), (10.0, 2.0), (10.9, 150.0), (20.0, 900.0)])
    assert probe.worst_ms(0.0, 1.1) == 300.0  # started within
    assert probe.worst_ms(1.2, 1.25) == 300.0  # started before, still in flight
    assert probe.worst_ms(10.0, 11.0) == 150.0
    assert probe.worst_ms(11.04, 11.5) == 150.0  # 10.9 + 0.150 reaches into it
    assert math.isnan(probe.worst_ms(11.06, 11.5))  # ended before it
    assert math.isnan(probe.worst_ms(12.0, 19.0))
