"""What the activator does with the open connections of a replica that died.

Handed-off connections stay open through the activator's own copy of each socket
(activator.direct.handoff), and the replica keeps one state byte per connection in a file both map
(thawwire.handoff_protocol.SlotState). When the replica is gone, `outcome` decides from that
byte, and `settle` does it: a request that had begun gets the activator's `502` JSON (the
replica consumed it and answered nothing; non-idempotent requests are not replayed), a
response being written is aborted (the client must see an error, never a body that looks
complete), and an idle connection is served by the activator from its next request on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from enum import StrEnum

from thawwire.handoff_protocol import SlotState

__all__ = ["LINGER_S", "Outcome", "abort", "bad_gateway", "outcome", "settle"]

LINGER_S = 2.0
"""How long a 502's connection is read (and discarded) after the response, before it is
closed: closing with unread request bytes would reset it and could destroy the 502 unread."""


class Outcome(StrEnum):
    """What happened to a handed-off connection the replica did not end itself (the
    `outcome` label of thaw_direct_fallbacks_total)."""

    RETURNED = "returned"  # the replica did not take it (stopping, bad message): served here
    BAD_GATEWAY = "bad_gateway"  # the replica died mid-request: 502 JSON
    ABORTED = "aborted"  # the replica died writing a response: connection reset
    TAKEN_BACK = "taken_back"  # the replica died with it idle: served here


def outcome(state: int) -> Outcome:
    """The fate of a dead replica's connection whose state byte is `state`."""
    if state == SlotState.IDLE:
        return Outcome.TAKEN_BACK
    if state == SlotState.STARTED:
        return Outcome.BAD_GATEWAY
    return Outcome.ABORTED  # RESPONDING, or a byte no replica writes: never pretend success


def bad_gateway(replica_id: str, model: str) -> bytes:
    """The complete 502 response for a request the replica died handling."""
    error = f"replica {replica_id} of model '{model}' died while handling the request"
    body = json.dumps({"error": error}).encode()
    head = (
        "HTTP/1.1 502 Bad Gateway\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


def abort(conn: socket.socket) -> None:
    """Close with a reset (SO_LINGER 0): the client sees an error at once."""
    with contextlib.suppress(OSError):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


async def settle(conn: socket.socket, response: bytes, *, linger_s: float = LINGER_S) -> None:
    """Write `response` whole (else reset), end our side, then read and drop what the client
    still sends until it closes or `linger_s` passes, and close."""
    try:
        sent = conn.send(response)  # ~200 bytes into an empty send buffer: all or nothing
    except OSError:
        sent = -1
    if sent != len(response):
        abort(conn)
        return
    loop = asyncio.get_running_loop()
    try:
        conn.shutdown(socket.SHUT_WR)
        async with asyncio.timeout(linger_s):
            while await loop.sock_recv(conn, 65536):
                pass
    except (OSError, TimeoutError):
        pass
    finally:
        conn.close()
