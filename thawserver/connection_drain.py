"""A stopping server's countdown for the HTTP connections its clients still hold open.

tritonserver, told to exit, stops accepting connections and keeps serving the ones already
open until their clients close them or its exit timeout runs out, logging the countdown once
a second ("Timeout 30: Found 1 HTTP service connections"); the time left is what in-flight
requests get afterwards. A client that sends one more request on its kept-alive connection
just after the signal is answered, not reset (Triton's L0_lifecycle
`test_shutdown_with_live_connection`).

Thaw answers every request served during the countdown with `Connection: close`
(`ConnectionGuard.start_draining`), so a busy client leaves as soon as its next answer is
written and the countdown ends early. Where Thaw differs: a connection kept alive with no
request for `DRAIN_IDLE_TIMEOUT_S` during the countdown is closed (Triton waits for it until
its exit timeout, 30 s by default): a client pool that holds connections it does not use
would otherwise hold every stop, and each scale-in of a pod, for the whole timeout.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

__all__ = ["DRAIN_IDLE_TIMEOUT_S", "count_down_connections"]

logger = logging.getLogger(__name__)

# A connection idle this long while the server stops is closed (a client that sends its next
# request within it is answered; Triton's test sends one 2 s after the signal).
DRAIN_IDLE_TIMEOUT_S = 5.0
# How often the countdown looks whether the last connection closed (between its log lines).
_POLL_S = 0.05


async def count_down_connections(
    open_connections: Callable[[], int],
    timeout_s: float,
    *,
    service: str = "HTTP",
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> float:
    """Wait while `open_connections()` is above 0, at most `timeout_s` whole seconds, logging
    Triton's countdown line once a second; the seconds of `timeout_s` left when it ended."""
    remaining = int(timeout_s)
    polls_per_second = round(1 / _POLL_S)
    while remaining > 0:
        count = open_connections()
        if count <= 0:
            break
        logger.info("Timeout %d: Found %d %s service connections", remaining, count, service)
        for _ in range(polls_per_second):
            await sleep(_POLL_S)
            if open_connections() <= 0:
                break
        remaining -= 1
    return max(0.0, timeout_s - (int(timeout_s) - remaining))
