"""How long a client may take and how many connections a server holds: one set of limits for
`thaw up` and `thaw serve`, HTTP/1.1 and gRPC alike.

The defaults follow the servers that face the internet (docs/hardening.md has the reasoning):

- `head_timeout_s` = 10: a request's head (request line and headers) must be complete 10 s
  after its first byte (for a new connection: after the accept). HAProxy's recommended
  `timeout http-request` is 10 s, Kestrel's header timeout 30 s, nginx's 60 s; a real client
  sends its head in one segment, so 10 s only ever cuts off slow-loris connections.
- `idle_timeout_s` = 75: a kept-alive connection with no request is closed after 75 s (nginx's
  `keepalive_timeout`). Longer than the 60 s idle timeout of the load balancers usually in
  front (AWS ALB), so the balancer, not the server, closes a pooled connection first and never
  sends a request into a connection being closed.
- `max_connections` = 10 000 per listener: past it a new connection is answered 503 and
  closed. Also the bound on calls in flight over gRPC.

0 turns a limit off (the "before" side of benchmarks/slow_clients.py). The body deadline is
each server's own setting (`--body-timeout-s`, thawserver.limit_flags): the handler that reads
the body answers 408 on both (thawserver.body_deadline).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "LIMIT_RANGES",
    "ConnectionLimits",
    "grpc_max_concurrent_rpcs",
    "grpc_server_options",
    "out_of_range",
]

# (low, high) of each limit; 0 (off) is allowed besides.
LIMIT_RANGES: dict[str, tuple[float, float]] = {
    "head_timeout_s": (0.1, 3600),
    "idle_timeout_s": (0.1, 86_400),
    "max_connections": (1, 1_000_000),
}


@dataclass(frozen=True)
class ConnectionLimits:
    """Per-connection deadlines and the open-connection cap of one listener (0: off)."""

    head_timeout_s: float = 10.0
    idle_timeout_s: float = 75.0
    max_connections: int = 10_000


def out_of_range(limits: ConnectionLimits, flags: Mapping[str, str] | None = None) -> str | None:
    """The first limit outside its range, in the one form config errors take
    (``"`head_timeout_s` = 0.01, must be 0 (off) or in [0.1, 3600]"``), named as `flags`
    names it (a field -> its command-line flag), or None."""
    for name, (low, high) in LIMIT_RANGES.items():
        value = getattr(limits, name)
        if value != 0 and not (math.isfinite(value) and low <= value <= high):
            shown = (flags or {}).get(name, name)
            return f"`{shown}` = {value:g}, must be 0 (off) or in [{low:g}, {high:g}]"
    return None


def grpc_server_options(limits: ConnectionLimits) -> list[tuple[str, int]]:
    """grpc.aio server options for the same limits: a connection must finish its HTTP/2
    handshake within the head deadline, one without calls is sent GOAWAY after the idle
    timeout, and past `max_connections` new connections are closed by grpc itself."""
    options: list[tuple[str, int]] = []
    if limits.head_timeout_s:
        options.append(("grpc.server_handshake_timeout_ms", _ms(limits.head_timeout_s)))
    if limits.idle_timeout_s:
        options.append(("grpc.max_connection_idle_ms", _ms(limits.idle_timeout_s)))
    if limits.max_connections:
        options.append(("grpc.max_allowed_incoming_connections", limits.max_connections))
    return options


def grpc_max_concurrent_rpcs(limits: ConnectionLimits) -> int | None:
    """The grpc.aio server's `maximum_concurrent_rpcs`: as many calls in flight as HTTP/1.1
    has connections (one request at a time each); past it a call is RESOURCE_EXHAUSTED."""
    return limits.max_connections or None


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))
