"""Ordering helpers for asyncio tests: let the event loop run instead of sleeping.

`settle` and `turns` count event-loop turns, not seconds, so a story over in-memory fakes is
as fast and as deterministic on a loaded machine as on an idle one. `eventually` is for waits
on real I/O (sockets), bounded by wall-clock time: by `HUNG_AFTER_S` unless told otherwise.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["HUNG_AFTER_S", "eventually", "settle", "turns"]

# The bound of a wait the test expects to end (a reply, a close, a state it polls for): it ends
# in milliseconds on an idle machine, but a machine loaded by a second test run beside this one
# can stall the loop or a process for seconds. Reaching the bound means hung, not slow. Tests of
# a deadline that should fire keep their own short one.
HUNG_AFTER_S = 30.0


async def turns(count: int = 50) -> None:
    """Run `count` event-loop turns: whatever was ready to run by then has run (e.g. to
    show that something did *not* happen)."""
    for _ in range(count):
        await asyncio.sleep(0)


async def settle(predicate: Callable[[], bool], *, max_turns: int = 10_000) -> None:
    """Run event-loop turns until `predicate()` holds; AssertionError after `max_turns`."""
    for _ in range(max_turns):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"not settled after {max_turns} event-loop turns")


async def eventually(predicate: Callable[[], bool], *, timeout_s: float = HUNG_AFTER_S) -> None:
    """Wait (polling every 10 ms) until `predicate()` holds; AssertionError after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s")
        await asyncio.sleep(0.01)
