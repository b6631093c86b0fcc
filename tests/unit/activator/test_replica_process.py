"""A local replica process whose start is cut short (`thaw up` stopping while its warm pool
refills) ends quietly: the start it never finished is not reported as an error nobody read.
What a replica prints besides its addresses (a Python model's `print`) is on `thaw up`'s
stdout, as on `thaw serve`'s."""

from __future__ import annotations

import asyncio
import gc
import sys
import time
from typing import Any

import aiohttp

from activator.errors import ActivationFailed
from activator.scaler.local.replica_process import ReplicaProcess
from thawwire.handoff_protocol import Surface, listening_line, surface_line

# A child that never prints its address (a replica still importing when it is stopped).
_NEVER_LISTENS = [sys.executable, "-c", "import time; time.sleep(60)"]


async def test_a_start_cut_short_by_stop_leaves_no_unread_error() -> None:
    loop = asyncio.get_running_loop()
    unread: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: unread.append(context))
    try:
        proc = await ReplicaProcess.spawn(_NEVER_LISTENS, "pool-9")
        async with aiohttp.ClientSession() as session:
            starting = asyncio.create_task(proc.wait_ready(session, time.monotonic() + 60))
            await asyncio.sleep(0.05)
            starting.cancel()  # what `thaw up`'s shutdown does to a refill in progress
            await asyncio.gather(starting, return_exceptions=True)
        assert await proc.stop(10) is not None
        del proc, starting
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert not [c for c in unread if "never retrieved" in str(c.get("message"))], unread


async def test_a_replica_that_exits_before_listening_still_fails_its_waiter() -> None:
    proc = await ReplicaProcess.spawn([sys.executable, "-c", "print('bye')"], "pool-10")
    async with aiohttp.ClientSession() as session:
        try:
            await proc.wait_ready(session, time.monotonic() + 60)
            raise AssertionError("a replica that never listened was taken as ready")
        except ActivationFailed as exc:
            assert "pool-10 exited before listening" in str(exc)
    await proc.stop(10)


async def test_a_models_print_is_on_thaw_ups_stdout_and_the_addresses_are_not(
    capfd: Any,
) -> None:
    lines = [
        surface_line(Surface.GRPC, "127.0.0.1:9"),
        listening_line("http://127.0.0.1:9"),
        "Found 1050 files in model directory",
    ]
    script = "; ".join(f"print({line!r})" for line in lines) + "; print('no end', end='')"
    proc = await ReplicaProcess.spawn([sys.executable, "-c", script], "model-7")
    await asyncio.wait_for(proc.proc.wait(), 60)
    await proc.stop(10)  # drains its output
    out = capfd.readouterr().out
    assert out.splitlines() == ["Found 1050 files in model directory", "no end"], out
    assert proc.grpc_address == "127.0.0.1:9"
