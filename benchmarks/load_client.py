"""A bounded-duration, closed-loop load generator, the same one for every server: HTTP (aiohttp)
and gRPC (grpc.aio, one `ModelInfer` call per request, the serialized message sent as is)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp
import grpc

# Reads the server's CPU seconds so far (user+sys of its whole process tree): sampled at the
# start and the end of the measured window.
CpuProbe = Callable[[], float]

__all__ = ["CpuProbe", "GrpcPayload", "LoadResult", "Payload", "run_grpc_load", "run_load"]


@dataclass(frozen=True)
class Payload:
    """One inference request, sent unchanged by every worker."""

    path: str
    body: bytes
    headers: dict[str, str]


@dataclass(frozen=True)
class GrpcPayload:
    """One serialized `ModelInferRequest`, sent unchanged by every worker (`ModelInfer`)."""

    message: bytes
    method: str = "/inference.GRPCInferenceService/ModelInfer"


@dataclass(frozen=True)
class LoadResult:
    """What one cell measured; latencies are of successful requests in the measured window."""

    concurrency: int
    duration_s: float
    ok: int
    errors: int
    latencies_ms: tuple[float, ...]
    server_cpu_s: float | None = None  # the server's CPU (user+sys) over the window, if probed

    @property
    def rps(self) -> float:
        return self.ok / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def cpu_us_per_request(self) -> float | None:
        """The server's CPU per successful request over the window (µs), if it was probed."""
        if self.server_cpu_s is None or self.ok == 0:
            return None
        return self.server_cpu_s / self.ok * 1e6

    def percentile_ms(self, q: float) -> float:
        """Nearest-rank percentile, `q` in [0, 100]; NaN when nothing succeeded."""
        if not self.latencies_ms:
            return float("nan")
        rank = max(0, min(len(self.latencies_ms) - 1, round(q / 100 * len(self.latencies_ms)) - 1))
        return self.latencies_ms[rank]


async def _worker(
    session: aiohttp.ClientSession,
    url: str,
    payload: Payload,
    window: tuple[float, float],
    latencies: list[float],
    errors: list[int],
) -> None:
    # Closed loop: one request in flight per worker, until run_load cancels it. A request counts
    # when it completes inside the measured window, whenever it started.
    measure_from, stop_at = window
    while True:
        start = time.perf_counter()
        try:
            async with session.post(url, data=payload.body, headers=payload.headers) as response:
                await response.read()
                ok = response.status == 200
        except (aiohttp.ClientError, TimeoutError):
            ok = False
        end = time.perf_counter()
        if measure_from <= end <= stop_at:
            if ok:
                latencies.append((end - start) * 1000.0)
            else:
                errors.append(1)
        if not ok:
            await asyncio.sleep(0.01)  # a failing server must not turn this into a busy loop


async def _measured_window(
    warmup_s: float, duration_s: float, cpu_probe: CpuProbe | None
) -> float | None:
    """Sleep through the warm-up and the window; the server CPU the window took, if probed."""
    await asyncio.sleep(warmup_s)
    before = cpu_probe() if cpu_probe is not None else 0.0
    await asyncio.sleep(duration_s)
    return cpu_probe() - before if cpu_probe is not None else None


async def run_load(
    base_url: str,
    payload: Payload,
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float,
    request_timeout_s: float = 30.0,
    cpu_probe: CpuProbe | None = None,
) -> LoadResult:
    """Keep `concurrency` requests in flight for `warmup_s + duration_s`; measure the last part
    (and the server's CPU over it, given `cpu_probe`)."""
    timeout = aiohttp.ClientTimeout(total=request_timeout_s)
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    latencies: list[float] = []
    errors: list[int] = []
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        measure_from = time.perf_counter() + warmup_s
        window = (measure_from, measure_from + duration_s)
        workers = [
            asyncio.create_task(
                _worker(session, base_url + payload.path, payload, window, latencies, errors)
            )
            for _ in range(concurrency)
        ]
        try:
            cpu_s = await _measured_window(warmup_s, duration_s, cpu_probe)
        finally:
            # Requests still in flight at the end of the window are abandoned, not awaited, so
            # a cell never outlasts its duration however slow the server is.
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
    return LoadResult(
        concurrency=concurrency,
        duration_s=duration_s,
        ok=len(latencies),
        errors=len(errors),
        latencies_ms=tuple(sorted(latencies)),
        server_cpu_s=cpu_s,
    )


async def _grpc_worker(
    call: Callable[..., Awaitable[bytes]],
    payload: GrpcPayload,
    window: tuple[float, float],
    latencies: list[float],
    errors: list[int],
    timeout_s: float,
) -> None:
    # The HTTP worker's loop, over one gRPC channel.
    measure_from, stop_at = window
    while True:
        start = time.perf_counter()
        try:
            await call(payload.message, timeout=timeout_s)
            ok = True
        except grpc.aio.AioRpcError:
            ok = False
        end = time.perf_counter()
        if measure_from <= end <= stop_at:
            if ok:
                latencies.append((end - start) * 1000.0)
            else:
                errors.append(1)
        if not ok:
            await asyncio.sleep(0.01)


async def run_grpc_load(
    address: str,
    payload: GrpcPayload,
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float,
    request_timeout_s: float = 30.0,
    cpu_probe: CpuProbe | None = None,
) -> LoadResult:
    """`run_load` over gRPC: `concurrency` workers, each with its own channel to `address`
    (as many independent tritonclient.grpc clients would have), one call in flight each."""
    options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
    channels = [grpc.aio.insecure_channel(address, options=options) for _ in range(concurrency)]
    latencies: list[float] = []
    errors: list[int] = []
    try:
        measure_from = time.perf_counter() + warmup_s
        window = (measure_from, measure_from + duration_s)
        calls = [channel.unary_unary(payload.method) for channel in channels]
        workers = [
            asyncio.create_task(
                _grpc_worker(call, payload, window, latencies, errors, request_timeout_s)
            )
            for call in calls
        ]
        try:
            cpu_s = await _measured_window(warmup_s, duration_s, cpu_probe)
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
    finally:
        await asyncio.gather(*(c.close() for c in channels), return_exceptions=True)
    return LoadResult(
        concurrency=concurrency,
        duration_s=duration_s,
        ok=len(latencies),
        errors=len(errors),
        latencies_ms=tuple(sorted(latencies)),
        server_cpu_s=cpu_s,
    )
