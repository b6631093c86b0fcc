"""The front door's pure parts (request-line parser, routing decision, load reports) and
the activator's end of a replica's handoff socket."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from pathlib import Path

import pytest

from activator.direct.front_door import (
    PEEK_BYTES,
    DirectView,
    Reason,
    RequestLine,
    parse_request_line,
    request_line,
    route,
    route_line,
)
from activator.direct.handoff import HandoffLink
from activator.direct.orphans import Outcome
from tests.fakes.fallback import FakeDoor
from tests.fakes.loop import HUNG_AFTER_S, eventually
from thawwire.errors import WireError
from thawwire.handoff_protocol import DRAIN, LoadReport, SlotState, encode_slot
from thawwire.paths import model_of

WARM = {"add_sub": DirectView(enabled=True, held=0)}
_IDLE_REPORT = b'{"in_flight": 0, "busy_s": 0, "connections": 0, "received": 0, "t": 1, '


def _route(data: bytes, views: dict[str, DirectView] | None = None, *, final: bool = False):
    table = WARM if views is None else views
    return route(data, view=table.get, final=final)


def test_an_inference_request_for_a_warm_model_is_handed_off() -> None:
    decision = _route(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (decision.reason, decision.model) == (Reason.HANDED_OFF, "add_sub")


@pytest.mark.parametrize(
    "target",
    [
        "/v2/models/add_sub",
        "/v2/models/add_sub/ready",
        "/v2/models/add_sub/config",
        "/v2/models/add_sub/infer?x=1",
        "/v2/models/add_sub/versions/1/infer",
        "/v2/models/add_sub/versions/1",
    ],
)
def test_model_paths_are_handed_off(target: str) -> None:
    data = f"GET {target} HTTP/1.1\r\n".encode()
    assert _route(data).reason is Reason.HANDED_OFF


@pytest.mark.parametrize(
    "target",
    [
        "/v2",
        "/v2/health/ready",
        "/v2/models/stats",
        "/v2/models/add_sub/stats",
        "/v2/models/add_sub/versions/1/stats",
        "/v2/models/add_sub/versions/x/infer",
        "/v2/models/add_sub/versions/1/infer/more",
        "/v2/models/add_sub/infer/more",
        "/v2/models/add_sub/bogus",
        "/v2/models/",
        "/v2/models/../etc/infer",
        "/v2/repository/index",
        "/metrics",
        "/thaw/status",
    ],
)
def test_everything_that_is_not_one_models_path_is_served_here(target: str) -> None:
    assert _route(f"GET {target} HTTP/1.1\r\n".encode()).reason is Reason.NOT_MODEL_PATH


@pytest.mark.parametrize(
    "data",
    [
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40 + b"\r\n",  # TLS hello
        b"GARBAGE\r\n\r\n",
        b"GET /v2 HTTP/9.9\r\n",
        b"GET /v2/models/a\x00b/ready HTTP/1.1\r\n",
        b"GET  /v2/models/add_sub HTTP/1.1\r\n",
        b"get /v2/models/add_sub HTTP/1.1\r\n",
        b"GET http://x/v2/models/add_sub/infer HTTP/1.1\r\n",
        b"GET /v2/models/add%5Fsub/infer HTTP/1.1\r\n",
        b"GET //v2/models/add_sub/infer HTTP/1.1\r\n",
        b"GET /v2/models/add_sub/infer#x HTTP/1.1\r\n",
        b"GET /v2/models/\xc3\xa9/infer HTTP/1.1\r\n",
        b"\r\nGET /v2/models/add_sub HTTP/1.1\r\n",
        b"GET /v2/models/add_sub HTTP/1.1\n",
        b"A" * PEEK_BYTES,  # a line that never ends within the peek window
    ],
)
def test_hostile_first_bytes_are_served_here(data: bytes) -> None:
    assert _route(data).reason is Reason.NOT_HTTP


def test_an_incomplete_line_is_peeked_again_then_times_out() -> None:
    data = b"POST /v2/models/add_sub/in"
    assert _route(data).reason is Reason.INCOMPLETE
    assert _route(data, final=True).reason is Reason.TIMEOUT
    assert _route(b"", final=True).reason is Reason.TIMEOUT


def test_unknown_disabled_limited_and_held_models_stay_in_the_activator() -> None:
    views = {
        "off": DirectView(enabled=False, held=0),
        "queued": DirectView(enabled=True, held=3),
        "limited": DirectView(enabled=True, held=0, limited=True),
    }
    assert _route(b"POST /v2/models/nope/infer HTTP/1.1\r\n", views).reason is (
        Reason.UNKNOWN_MODEL
    )
    assert _route(b"POST /v2/models/off/infer HTTP/1.1\r\n", views).reason is Reason.DISABLED
    assert _route(b"POST /v2/models/queued/infer HTTP/1.1\r\n", views).reason is Reason.HELD
    # A per-replica limit (thaw.container_concurrency) holds only where every request passes.
    assert _route(b"POST /v2/models/limited/infer HTTP/1.1\r\n", views).reason is Reason.LIMITED


def test_only_get_head_and_post_are_handed_off() -> None:
    for method in ("PUT", "DELETE", "OPTIONS", "CONNECT"):
        line = f"{method} /v2/models/add_sub HTTP/1.1\r\n".encode()
        assert _route(line).reason is Reason.NOT_MODEL_PATH


def test_the_request_line_parser() -> None:
    assert parse_request_line(b"HEAD /v2/models/m/ready?a=b HTTP/1.0\r\nrest") == RequestLine(
        "HEAD", "/v2/models/m/ready"
    )
    assert model_of("/v2/models/m.v2-x_y/versions/12/config") == "m.v2-x_y"
    assert model_of("/v2/models/" + "a" * 256) is None  # thawwire.names: at most 255


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"not json",
        b"[]",
        b'{"in_flight": 1}',
        b'{"in_flight": -1, "busy_s": 0, "connections": 0, "t": 1}',
        b'{"in_flight": 1.5, "busy_s": 0, "connections": 0, "t": 1}',
        b'{"in_flight": true, "busy_s": 0, "connections": 0, "t": 1}',
        b'{"in_flight": 0, "busy_s": "NaN", "connections": 0, "t": 1}',
        b'{"in_flight": 0, "busy_s": -1, "connections": 0, "t": 1}',
        b'{"in_flight": 0, "busy_s": 1e400, "connections": 0, "t": 1}',
        b'{"in_flight": 0, "busy_s": 0, "connections": 1e3, "received": 0, "t": 1}',
        b'{"in_flight": 0, "busy_s": 0, "connections": 0, "t": 1}',  # no acknowledgement
        _IDLE_REPORT + b'"closed": 1}',
        _IDLE_REPORT + b'"returned": [-1]}',
        _IDLE_REPORT + b'"closed": ["0"]}',
    ],
)
def test_bad_load_reports_are_refused(line: bytes) -> None:
    with pytest.raises(WireError):
        LoadReport.from_line(line)


def test_a_load_report_extrapolates_its_busy_time() -> None:
    report = LoadReport.from_line(
        b'{"in_flight": 2, "busy_s": 10.0, "connections": 3, "received": 5, "t": 100.0}'
    )
    assert isinstance(report, LoadReport)
    assert (report.connections, report.received) == (3, 5)
    assert report.busy_at(100.5) == pytest.approx(11.0)
    assert report.busy_at(99.0) == pytest.approx(10.0)  # never backwards


async def test_a_link_sends_sockets_and_reads_load_reports(tmp_path: Path) -> None:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(tmp_path / "replica.sock"))
    server.listen()
    link = HandoffLink(tmp_path / "replica.sock", "m-1", model="m")
    await link.connect(timeout_s=HUNG_AFTER_S)
    replica_end, _ = server.accept()
    door = FakeDoor()
    ended, ended_peer = socket.socketpair()
    returned, returned_peer = socket.socketpair()
    assert link.send(ended, door)
    assert link.send(returned, door)
    slots = []
    for _ in range(2):
        data, fds, _, _ = socket.recv_fds(replica_end, 4, 4)
        assert len(fds) == 1
        slots.append(int.from_bytes(data, "big"))
        os.close(fds[0])
    assert slots == [0, 1]
    assert (link.connections, link.in_flight) == (2, 0)  # open until reported ended
    t0 = time.monotonic()
    report = {"in_flight": 0, "busy_s": 0.0, "connections": 1, "received": 2, "t": t0}
    replica_end.sendall(json.dumps(report).encode() + b"\n")
    await eventually(lambda: link._report.t == t0)
    assert link.sample(t0) == 0.0  # the first sample only sets the baseline
    report.update(in_flight=2, busy_s=1.0, t=t0 + 0.5)
    replica_end.sendall(json.dumps(report).encode() + b"\ngarbage\n")
    await eventually(lambda: link.in_flight == 2)
    assert link.connections == 2 and ended.fileno() != -1  # acknowledged, still kept
    # busy went 0 at t0 -> 1.0 at t0 + 0.5: 1.0 in-flight-seconds over 0.5 s
    assert link.sample(t0 + 0.6) == pytest.approx(2.0)
    assert link.sample(t0 + 0.7) == 2.0  # no report since: the 2 in flight held since
    report.update(closed=[0], returned=[1])
    replica_end.sendall(json.dumps(report).encode() + b"\n")
    await eventually(lambda: link.connections == 0)
    assert ended.fileno() == -1  # the replica ended it: our copy is closed
    assert door.taken_back == [returned] and returned.fileno() != -1  # ours to serve
    assert door.counts == [("m", Outcome.RETURNED)]
    replica_end.close()
    await eventually(lambda: not link.connected and link.lost.is_set())
    assert not link.send(returned, door)
    for sock in (server, returned, ended_peer, returned_peer):
        sock.close()


def test_direct_load_samples_never_exceed_the_load_the_replica_measured() -> None:
    """A closed loop of 16 clients keeps 16 requests in flight on direct connections, minus
    a moment between one's answer and its next request. Sampling each report extrapolated to
    the tick read 15.79 then 16.18: a tick over 16 made a target of 8 ask for a third replica
    (the same load in-path stayed at 2). Between reports the samples are exact."""
    link = HandoffLink(Path("/nonexistent.sock"), "m-1", model="m")

    def report(t: float, in_flight: int, busy_s: float) -> None:
        line = {"in_flight": in_flight, "busy_s": busy_s, "connections": 16, "received": 16, "t": t}
        link._take(json.dumps(line).encode() + b"\n")  # what the socket's reader does

    report(0.40, 16, 10.0)
    assert link.sample(0.40) == 0.0  # the baseline
    # One request ends at 0.44 and its client's next one begins at 0.46; the report at 0.45
    # saw 15 in flight.
    report(0.45, 15, 10.0 + 16 * 0.04 + 15 * 0.01)
    first = link.sample(0.50)
    busy = 10.0 + 16 * 0.04 + 15 * 0.01 + 15 * 0.01 + 16 * 0.04  # at 0.50
    for tenth in range(1, 5):  # 16 in flight from 0.46 on, reported every 50 ms
        report(0.50 + 0.1 * tenth, 16, busy + 16 * 0.1 * tenth)
    second = link.sample(1.00)
    # Each sample is the mean between two reports (0.40-0.45, 0.45-0.90): 15.8 and 15.98.
    assert first == pytest.approx(15.8) and second == pytest.approx(7.19 / 0.45)


@pytest.mark.parametrize(
    "target",
    ["/v2/models/add_sub/infer?thaw-sent-back=1", "/v2/models/add_sub/infer?a=b&thaw-sent-back=1"],
)
def test_a_request_a_replica_sent_back_is_served_here(target: str) -> None:
    """A replica sends back what it cannot answer (runtime.direct.send_back): handing its connection
    off again would bounce it between the two for good."""
    assert _route(f"POST {target} HTTP/1.1\r\n".encode()).reason is Reason.SENT_BACK
    lookalike = f"POST {target.replace('=1', '=0')} HTTP/1.1\r\n".encode()
    assert _route(lookalike).reason is Reason.HANDED_OFF


async def test_a_draining_replica_is_stopped_once_its_direct_connections_are_quiet(
    tmp_path: Path,
) -> None:
    """Scaling down a replica that keep-alive clients were busy on (6 of them in a closed loop)
    answered 502 to one and reset two: the SIGTERM dropped the requests they had sent the
    instant before. `quiesce` waits until every open connection stays idle (its clients
    leave at their next answer, told by the drain message, or go quiet), or none is open, or
    the limit."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(tmp_path / "replica.sock"))
    server.listen()
    link = HandoffLink(tmp_path / "replica.sock", "m-1", model="m")
    await link.connect(timeout_s=HUNG_AFTER_S)
    replica_end, _ = server.accept()
    door = FakeDoor()
    busy, busy_peer = socket.socketpair()
    idle, idle_peer = socket.socketpair()
    assert link.send(busy, door) and link.send(idle, door)
    slots = []
    for _ in range(2):
        data, fds, _, _ = socket.recv_fds(replica_end, 4, 4)
        slots.append(int.from_bytes(data, "big"))
        os.close(fds[0])
    link.stop_sending()
    link._states[slots[0]] = SlotState.STARTED  # what the replica writes: a request begun
    quiet = asyncio.create_task(link.quiesce(HUNG_AFTER_S, quiet_s=0.05, poll_s=0.005))
    await asyncio.sleep(0.3)
    assert not quiet.done()  # a request in flight on one connection: not yet
    # The replica was told once that it is drained: its clients leave at their next answer.
    replica_end.setblocking(False)
    assert replica_end.recv(64) == encode_slot(DRAIN)
    replica_end.setblocking(True)
    link._states[slots[0]] = SlotState.IDLE  # answered; the client sends nothing more
    await asyncio.wait_for(quiet, HUNG_AFTER_S)  # both idle: it may stop now
    # Busy until the limit: stopped all the same.
    link._states[slots[1]] = SlotState.RESPONDING
    await asyncio.wait_for(link.quiesce(0.1), HUNG_AFTER_S)
    # Busy, then ended by the replica (max age: `Connection: close`): nothing left to wait for.
    quiet = asyncio.create_task(link.quiesce(HUNG_AFTER_S))
    await asyncio.sleep(0.1)
    assert not quiet.done()
    report = {"in_flight": 0, "busy_s": 0.0, "connections": 0, "received": 2, "t": 0.0}
    report["closed"] = slots
    replica_end.sendall(json.dumps(report).encode() + b"\n")
    await asyncio.wait_for(quiet, HUNG_AFTER_S)
    assert link.connections == 0
    replica_end.close()
    for sock in (server, busy_peer, idle_peer):
        sock.close()


async def test_a_request_whose_client_hung_up_stops_counting_with_its_connection(
    tmp_path: Path,
) -> None:
    """Three clients hung up 1 s into 3 s requests on direct connections: the replica's last
    report (the one that said their connections ended) still had two of the requests running,
    and no report came after it (a replica reports while it has connections). Counted for
    good, those two kept the model at one replica forever. In-path, a hang-up ends the count."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(tmp_path / "replica.sock"))
    server.listen()
    link = HandoffLink(tmp_path / "replica.sock", "m-1", model="m")
    await link.connect(timeout_s=HUNG_AFTER_S)
    replica_end, _ = server.accept()
    conn, peer = socket.socketpair()
    assert link.send(conn, FakeDoor())
    data, fds, _, _ = socket.recv_fds(replica_end, 4, 4)
    os.close(fds[0])
    slot = int.from_bytes(data, "big")
    t0 = time.monotonic()
    report = {"in_flight": 2, "busy_s": 0.0, "connections": 1, "received": 1, "t": t0}
    replica_end.sendall(json.dumps(report).encode() + b"\n")
    await eventually(lambda: link.in_flight == 2)
    assert link.sample(t0) == 0.0  # the baseline
    report.update(busy_s=2.0, connections=0, t=t0 + 1.0, closed=[slot])
    replica_end.sendall(json.dumps(report).encode() + b"\n")
    await eventually(lambda: link.connections == 0)
    assert link.in_flight == 0  # its clients are gone
    assert link.sample(t0 + 1.5) == pytest.approx(2.0)  # while they were there: counted
    assert link.sample(t0 + 2.0) == 0.0  # no report after: nothing in flight any more
    assert link.sample(t0 + 60.0) == 0.0
    replica_end.close()
    for sock in (server, peer):
        sock.close()


@pytest.mark.parametrize(
    ("method", "target", "reason"),
    [
        ("POST", "/v2/models/add_sub/infer", Reason.HANDED_OFF),
        ("GET", "/v2/models/add_sub/ready?x=1", Reason.HANDED_OFF),
        ("GET", "/v2/health/ready", Reason.NOT_MODEL_PATH),
        ("GET", "/v2/models/add%5Fsub/ready", Reason.NOT_HTTP),
        ("POST", "/v2/models/add_sub/infer?thaw-sent-back=1", Reason.SENT_BACK),
    ],
)
def test_a_later_request_on_a_connection_is_routed_as_a_first_one(
    method: str, target: str, reason: Reason
) -> None:
    """What a kept-alive connection's later request is judged by (activator.direct.move_over):
    the same rule as a new connection's first request line."""
    line = request_line(method, target)
    later = line if isinstance(line, Reason) else route_line(line, view=WARM.get).reason
    assert later is reason
    assert _route(f"{method} {target} HTTP/1.1\r\n".encode()).reason is reason
