"""thawwire.handoff_protocol: the listening line, slot messages, state bytes and load reports.
Load reports are read strictly: every hostile line is a WireError, never a crash or a report."""

from __future__ import annotations

import json

import pytest

from thawwire.errors import WireError
from thawwire.handoff_protocol import (
    LISTENING_PREFIX,
    MAX_REPORT_LINE_BYTES,
    MAX_SLOTS_PER_REPORT,
    SLOT_BYTES,
    LoadReport,
    SlotState,
    decode_slot,
    encode_slot,
    listening_line,
    listening_url,
)

GOOD = {"in_flight": 1, "busy_s": 2.5, "connections": 3, "received": 4, "t": 10.0}


def _line(**changes: object) -> bytes:
    return json.dumps({**GOOD, **changes}).encode()


def test_the_listening_line_round_trips() -> None:
    line = listening_line("http://127.0.0.1:8123")
    assert line == "THAW_LISTENING http://127.0.0.1:8123" and line.startswith(LISTENING_PREFIX)
    assert listening_url(line + "\n") == "http://127.0.0.1:8123"
    for other in ("", "THAW_LISTENING", "THAW_LISTENING  ", "THAW_LISTENINGX http://x",
                  "INFO listening on http://x", "thaw_listening http://x"):  # fmt: skip
        assert listening_url(other) is None


def test_slots_travel_as_four_big_endian_bytes() -> None:
    assert SLOT_BYTES == 4 and encode_slot(0x01020304) == b"\x01\x02\x03\x04"
    assert decode_slot(encode_slot(65535)) == 65535
    assert decode_slot(b"\x00") is None and decode_slot(b"\x00" * 5) is None


def test_state_bytes_are_the_replicas_and_the_activators_alike() -> None:
    assert [int(s) for s in (SlotState.IDLE, SlotState.STARTED, SlotState.RESPONDING)] == [0, 1, 2]


def test_a_report_round_trips_through_its_line() -> None:
    report = LoadReport(2, 1.25, 3, 99.5, received=7, closed=(1, 2), returned=(5,))
    line = report.to_line()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert LoadReport.from_line(line) == report
    assert LoadReport.from_line(line.rstrip()) == report
    # Older lines without the slot lists still read (nothing closed or returned).
    assert LoadReport.from_line(_line()) == LoadReport(1, 2.5, 3, 10.0, received=4)


def test_busy_time_extrapolates_forward_only() -> None:
    report = LoadReport(in_flight=2, busy_s=10.0, connections=3, t=100.0, received=5)
    assert report.busy_at(100.5) == pytest.approx(11.0)
    assert report.busy_at(99.0) == pytest.approx(10.0)


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"\n",
        b"not json",
        b"\xff\xfe\x00",
        b"[]",
        b"null",
        b'"in_flight"',
        b"[" * 100_000,  # nesting deep enough for a RecursionError
        b'{"in_flight": 1}',
        b" " * (MAX_REPORT_LINE_BYTES + 1),
        _line(in_flight=-1),
        _line(in_flight=1.5),
        _line(in_flight=True),
        _line(in_flight="1"),
        _line(in_flight=1 << 62),
        _line(connections=1e3),
        _line(received=None),
        _line(busy_s="1.5"),
        _line(busy_s=-1),
        _line(busy_s=False),
        _line(t="NaN"),
        _line(closed=1),
        _line(closed=["0"]),
        _line(closed=[0.0]),
        _line(returned=[-1]),
        _line(returned=[1 << 32]),
        _line(closed=list(range(MAX_SLOTS_PER_REPORT + 1))),
        _line(extra=1),
        b'{"in_flight": 0, "busy_s": 1e400, "connections": 0, "received": 0, "t": 1}',
        b'{"in_flight": 0, "busy_s": NaN, "connections": 0, "received": 0, "t": 1}',
        b'{"in_flight": 0, "busy_s": 0, "connections": 0, "received": 0, "t": Infinity}',
        b'{"in_flight": 0, "busy_s": 0, "connections": 0, "t": 1}',  # no acknowledgement
    ],
)
def test_hostile_report_lines_are_refused(line: bytes) -> None:
    with pytest.raises(WireError):
        LoadReport.from_line(line)


@pytest.mark.parametrize(
    "report",
    [
        LoadReport(-1, 0.0, 0, 1.0),
        LoadReport(0, -0.5, 0, 1.0),
        LoadReport(0, float("nan"), 0, 1.0),
        LoadReport(0, 0.0, 0, float("inf")),
        LoadReport(0, 0.0, 0, 1.0, closed=tuple(range(MAX_SLOTS_PER_REPORT + 1))),
    ],
)
def test_a_report_the_reader_would_refuse_is_never_written(report: LoadReport) -> None:
    with pytest.raises(WireError):
        report.to_line()


def test_a_full_report_fits_the_readers_line_limit() -> None:
    slots = tuple(range((1 << 32) - MAX_SLOTS_PER_REPORT, 1 << 32))
    line = LoadReport(1 << 61, 1e300, 1 << 61, 1e300, 1 << 61, slots, slots).to_line()
    assert len(line) <= MAX_REPORT_LINE_BYTES
    assert LoadReport.from_line(line).closed == slots
