"""Checks shared by the slow-client tests of `thaw serve` and `thaw up`: the same raw-socket
behaviour is asserted against both servers' HTTP ports (and their gRPC ports)."""

from __future__ import annotations

import asyncio
import json
import socket
import time

from tests.fixtures.slow_clients import LatencyProbe, hold_slow_connections, percentile

__all__ = [
    "assert_body_deadline",
    "assert_cap_refuses",
    "assert_grpc_handshake_deadline",
    "assert_idle_close",
    "assert_slow_heads_closed",
]

# Slack over a deadline before a close counts as late: the machine running the tests is shared.
SLACK_S = 3.0
# "Not before the deadline" is measured from a moment before the server's clock can have
# started (before the connect, or before the bytes that start it are sent); "not after the
# deadline + slack" from the latest moment this side saw. Measured from the latter alone, a
# busy machine makes a punctual close look early (issue 24's slow-heads failure).


def _read_until_close(sock: socket.socket, within_s: float) -> bytes:
    sock.settimeout(within_s)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def assert_slow_heads_closed(host: str, port: int, count: int, head_timeout_s: float) -> None:
    """`count` connections trickling a head one byte a second are all answered 408 and closed
    within the head deadline (plus slack), while a normal request keeps being answered."""
    with LatencyProbe(host, port, "/v2/health/live", interval_s=0.05) as probe:
        result = asyncio.run(
            hold_slow_connections(host, port, count, hold_s=head_timeout_s + 2 * SLACK_S)
        )
    assert result.failed_to_open == 0
    assert result.opened == count
    assert result.still_open == 0, f"{result.still_open} of {count} slow connections stayed open"
    assert result.closed_within(head_timeout_s + SLACK_S) == count, sorted(result.closed_after_s)
    # Not before the deadline: counted from before each connect began (the server's clock
    # starts at its accept, later), not from when this busy loop saw the connect done.
    assert min(result.closed_since_dial_s) >= head_timeout_s - 0.2, sorted(
        result.closed_since_dial_s
    )[:5]
    assert result.statuses == {"408": count}
    assert set(probe.statuses) == {"200"}, probe.statuses
    assert len(probe.latencies_ms) >= 5
    # Generous: the 50 ms goal is benchmarks/slow_clients.py's, on a quiet machine.
    assert percentile(probe.latencies_ms, 99) < 1000, sorted(probe.latencies_ms)[-5:]


def assert_body_deadline(host: str, port: int, path: str, body_timeout_s: float) -> None:
    """A body that stops arriving is answered, in time, with the one body-deadline answer of
    both servers (thawserver.body_deadline): 408 and `{"error": "request body ... within N s
    ..."}` in JSON; then the connection is closed."""
    with socket.create_connection((host, port), timeout=30) as sock:
        sending = time.monotonic()  # the body's clock starts once the server has the head
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{{".encode())
        sent = time.monotonic()
        data = _read_until_close(sock, body_timeout_s + SLACK_S + 5)
    closed = time.monotonic()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), data[:200]
    assert b"\r\ncontent-type: application/json" in head.lower(), head
    error = json.loads(body)
    assert list(error) == ["error"], error
    assert error["error"].startswith("request body "), error
    assert f" within {body_timeout_s:g} s" in error["error"], error
    assert closed - sending >= body_timeout_s - 0.2, closed - sending
    assert closed - sent < body_timeout_s + SLACK_S, closed - sent


def assert_idle_close(host: str, port: int, idle_timeout_s: float) -> None:
    """A kept-alive connection is closed by the server `idle_timeout_s` after its answer."""
    with socket.create_connection((host, port), timeout=30) as sock:
        asked = time.monotonic()  # the idle clock starts once the server has answered
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.settimeout(10)
        answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200"), answer
        assert b"Connection: close" not in answer  # kept alive
        answered = time.monotonic()
        rest = _read_until_close(sock, idle_timeout_s + SLACK_S + 5)
    closed = time.monotonic()
    assert rest == b""
    assert closed - asked >= idle_timeout_s - 0.2, closed - asked
    assert closed - answered < idle_timeout_s + SLACK_S, closed - answered


def assert_cap_refuses(host: str, port: int, cap: int) -> None:
    """With `cap` connections open, the next is answered 503 + close; one freed is reusable.

    The server counts a connection when its loop accepts it, and frees it when its loop sees
    the close: neither is observable from here, so each side is polled (a bounded number of
    probes) instead of assumed after a fixed sleep, which a loaded machine outlasts."""
    held = [socket.create_connection((host, port), timeout=30) for _ in range(cap)]
    try:
        # A request that asks to keep the connection: the refusal itself must close it.
        head, body = _probe_until(host, port, b"HTTP/1.1 503", within_s=20, close=False)
        assert head.startswith(b"HTTP/1.1 503"), head[:200]
        assert b"Connection: close" in head
        assert "retry later" in json.loads(body)["error"]
        held.pop().close()
        head, _ = _probe_until(host, port, b"HTTP/1.1 200", within_s=20, close=True)
        assert head.startswith(b"HTTP/1.1 200"), head[:200]
    finally:
        for sock in held:
            sock.close()


def _probe_until(
    host: str, port: int, status: bytes, *, within_s: float, close: bool
) -> tuple[bytes, bytes]:
    """GET /v2/health/live on fresh connections until the answer starts with `status` or
    `within_s` passes; the last answer's head and body (read until the server closes)."""
    request = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n"
    request += b"Connection: close\r\n\r\n" if close else b"\r\n"
    deadline = time.monotonic() + within_s
    while True:
        with socket.create_connection((host, port), timeout=30) as sock:
            sock.sendall(request)
            head, _, body = _read_until_close(sock, 10).partition(b"\r\n\r\n")
        if head.startswith(status) or time.monotonic() > deadline:
            return head, body
        time.sleep(0.05)


def assert_grpc_handshake_deadline(address: str, head_timeout_s: float) -> None:
    """A gRPC connection that never completes its HTTP/2 preface is closed at the deadline."""
    host, port = address.rsplit(":", 1)
    for partial in (b"", b"PRI * HTTP/2.0\r\n"):
        dialled = time.monotonic()  # the deadline starts at the server's accept, later
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(partial)
            sent = time.monotonic()
            _read_until_close(sock, head_timeout_s + SLACK_S + 5)
            closed = time.monotonic()
        assert closed - dialled >= head_timeout_s - 0.2, closed - dialled
        assert closed - sent < head_timeout_s + SLACK_S, closed - sent
