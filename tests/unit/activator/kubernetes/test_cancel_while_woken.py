"""A background loop woken in the same turn as it is cancelled must still stop.

Python 3.11's `asyncio.wait_for` returns the awaited result when the cancellation and the
result arrive together, dropping the cancellation: a `while True` loop around
`wait_for(event.wait(), period)` then never ends, and whatever awaits it at shutdown hangs
(seen as a 120 s test timeout when the follower's report sender was cancelled right after an
urgent report was asked for). The loops wait with `asyncio.timeout`, which keeps it.
"""

from __future__ import annotations

import asyncio

import aiohttp

from activator.observe.metrics import Metrics
from activator.scaler.kubernetes.peer_reports import PeerReports


async def test_the_report_sender_stops_when_cancelled_as_it_is_woken() -> None:
    async with aiohttp.ClientSession() as session:
        reports = PeerReports(
            "follower", session, Metrics(), models=frozenset({"m"}), host="127.0.0.1",
            port=0, interval_s=60, ttl_s=120, is_leader=lambda: False,
            leader=lambda: None, leader_url=lambda: None,
        )  # fmt: skip
        sender = asyncio.ensure_future(reports.run())
        for _ in range(3):  # the sender is waiting for its period or an urgent report
            await asyncio.sleep(0)
        reports.exchange("m", mean=0.0, current=1)  # urgent: wakes the sender...
        sender.cancel()  # ...in the same turn as it is cancelled
        done, _ = await asyncio.wait({sender}, timeout=5)
        assert sender in done, "the sender swallowed its cancellation and kept running"
        assert sender.cancelled()
