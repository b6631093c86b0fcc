"""The benchmark's load client measures what the server does and never outlasts its window."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator

import grpc
import pytest
from aiohttp import web

from benchmarks.load_client import GrpcPayload, LoadResult, Payload, run_grpc_load, run_load
from benchmarks.serve_report import Cell, median_round, render_spread, render_table
from tests.fakes.loop import HUNG_AFTER_S


async def _ok(request: web.Request) -> web.Response:
    await request.read()
    return web.json_response({"outputs": []})


async def _fail(request: web.Request) -> web.Response:
    return web.json_response({"error": "boom"}, status=500)


async def _hang(request: web.Request) -> web.Response:
    await asyncio.sleep(60)
    return web.json_response({})


@pytest.fixture
async def server() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/ok", _ok)
    app.router.add_post("/fail", _fail)
    app.router.add_post("/hang", _hang)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


def _payload(path: str) -> Payload:
    return Payload(path, b'{"inputs": []}', {"Content-Type": "application/json"})


async def test_counts_successes_in_the_window(server: str) -> None:
    result = await run_load(server, _payload("/ok"), concurrency=4, duration_s=0.6, warmup_s=0.2)
    # Some: how many a 0.6 s window holds is the machine's (a loaded one's loop may manage few).
    assert result.ok > 0 and result.errors == 0
    assert result.rps == pytest.approx(result.ok / 0.6)
    assert 0 < result.percentile_ms(50) <= result.percentile_ms(99)


async def test_server_cpu_is_probed_at_the_window_edges_not_over_the_warmup(server: str) -> None:
    readings = iter([10.0, 10.25])  # the server's CPU seconds at the window's start, then end
    probed: list[float] = []

    def probe() -> float:
        probed.append(time.perf_counter())
        return next(readings)

    started = time.perf_counter()
    result = await run_load(
        server, _payload("/ok"), concurrency=2, duration_s=0.4, warmup_s=0.3, cpu_probe=probe
    )
    assert len(probed) == 2
    assert probed[0] - started >= 0.3  # after the warm-up
    assert probed[1] - probed[0] >= 0.4  # across the window
    assert result.server_cpu_s == pytest.approx(0.25)
    assert result.cpu_us_per_request == pytest.approx(0.25 / result.ok * 1e6)
    unprobed = await run_load(server, _payload("/ok"), concurrency=1, duration_s=0.1, warmup_s=0)
    assert unprobed.server_cpu_s is None and unprobed.cpu_us_per_request is None


async def test_server_errors_are_counted_not_timed(server: str) -> None:
    result = await run_load(server, _payload("/fail"), concurrency=2, duration_s=0.5, warmup_s=0.1)
    assert result.ok == 0 and result.errors > 0
    assert result.errors <= 2 * 0.5 / 0.01 + 2  # failures back off: no busy loop
    assert math.isnan(result.percentile_ms(50))


async def test_a_hanging_server_cannot_stretch_the_run(server: str) -> None:
    started = time.perf_counter()
    result = await run_load(server, _payload("/hang"), concurrency=8, duration_s=0.5, warmup_s=0.2)
    # Ended with its window, not by the 60 s hang (a loaded machine only adds to the 0.7 s).
    assert time.perf_counter() - started < HUNG_AFTER_S
    assert result.ok == 0


async def test_unreachable_server_reports_errors() -> None:
    url = "http://127.0.0.1:9"  # discard port: nothing listens there
    result = await run_load(url, _payload("/ok"), concurrency=2, duration_s=0.3, warmup_s=0.0)
    assert result.ok == 0 and result.errors > 0


def test_table_compares_thaw_with_the_best_peer() -> None:
    def cell(server: str, ok: int) -> Cell:
        result = LoadResult(8, 1.0, ok, 0, tuple(float(i) for i in range(1, ok + 1)))
        return Cell(server, "add_sub", 8, result)

    missing = Cell("triton", "resnet50", 8, None, "no onnxruntime backend")
    table = render_table([cell("thaw", 300), cell("triton", 200), cell("kserve", 100), missing])
    vs_peer = [c.strip() for c in table.splitlines()[0].split("|")].index("vs best peer")
    rows = {line.split("|")[4].strip(): line.split("|") for line in table.splitlines()[2:]}
    assert rows["thaw"][vs_peer].strip() == "1.50x"
    assert rows["kserve"][vs_peer].strip() == "0.50x"
    assert "no onnxruntime backend" in table


def test_a_cell_reports_its_median_round_not_an_outlier() -> None:
    def result(ok: int) -> LoadResult:
        return LoadResult(1, 1.0, ok, 0, (1.0,) * ok)

    assert median_round([result(900), result(100), result(5000)]) == result(900)
    assert median_round([result(300), result(200)]) == result(200)  # lower middle
    assert median_round([]) is None


def test_the_spread_gives_each_cells_median_and_range_over_its_rounds() -> None:
    def result(ok: int, cpu_s: float | None) -> LoadResult:
        return LoadResult(8, 1.0, ok, 0, (1.0,) * ok, cpu_s)

    ran = (result(100, 0.03), result(300, 0.06), result(200, None))
    cells = [
        Cell("thaw", "add_sub", 8, median_round(list(ran)), rounds=ran),
        Cell("kserve", "add_sub", 8, None, "not installed"),
    ]
    lines = render_spread(cells).splitlines()[2:]
    assert len(lines) == 1  # a cell that never ran has no spread
    # req/s 100, 300, 200; CPU 300 µs and 200 µs per request (the third round was not probed)
    assert lines[0] == "| http | add_sub | 8 | thaw | 3 | 200 (100 to 300) | 250 (200 to 300) |"


def test_a_cell_where_nothing_completed_says_so() -> None:
    empty = Cell("kserve", "resnet50", 32, LoadResult(32, 4.0, 0, 0, ()))
    assert "nothing completed in the window" in render_table([empty])


@pytest.fixture
async def grpc_server() -> AsyncIterator[str]:
    async def infer(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        if request == b"fail":
            await context.abort(grpc.StatusCode.INTERNAL, "boom")
        if request == b"hang":
            await asyncio.sleep(60)
        return b"ok"

    handler = grpc.method_handlers_generic_handler(
        "inference.GRPCInferenceService",
        {"ModelInfer": grpc.unary_unary_rpc_method_handler(infer)},
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield f"127.0.0.1:{port}"
    await server.stop(0)


async def test_grpc_load_counts_successes_failures_and_never_outlasts_its_window(
    grpc_server: str,
) -> None:
    ok = await run_grpc_load(
        grpc_server, GrpcPayload(b"x"), concurrency=4, duration_s=0.6, warmup_s=0.2
    )
    assert ok.ok > 0 and ok.errors == 0  # some: how many fit in 0.6 s is the machine's
    assert 0 < ok.percentile_ms(50) <= ok.percentile_ms(99)
    failing = await run_grpc_load(
        grpc_server, GrpcPayload(b"fail"), concurrency=2, duration_s=0.5, warmup_s=0.1
    )
    assert failing.ok == 0 and 0 < failing.errors <= 2 * 0.5 / 0.01 + 2
    started = time.perf_counter()
    hanging = await run_grpc_load(
        grpc_server, GrpcPayload(b"hang"), concurrency=4, duration_s=0.4, warmup_s=0.1
    )
    assert time.perf_counter() - started < HUNG_AFTER_S and hanging.ok == 0  # not the 60 s hang


def test_grpc_rows_are_their_own_group() -> None:
    result = LoadResult(8, 1.0, 100, 0, (1.0,) * 100)
    cells = [
        Cell("thaw", "add_sub", 8, result, protocol="grpc"),
        Cell("triton", "add_sub", 8, LoadResult(8, 1.0, 50, 0, (2.0,) * 50), protocol="grpc"),
        Cell("kserve", "add_sub", 8, None, "no gRPC endpoint", protocol="grpc"),
        Cell("thaw", "add_sub", 8, LoadResult(8, 1.0, 400, 0, (1.0,) * 400)),
    ]
    lines = render_table(cells).splitlines()[2:]
    assert lines[0].startswith("| grpc | add_sub | 8 | thaw | 100.0 |")
    assert lines[0].endswith("| 2.00x | - |")  # against Triton's gRPC, not anyone's HTTP
    assert "| grpc | add_sub | 8 | kserve | - |" in lines[2] and "no gRPC endpoint" in lines[2]
    assert lines[3].startswith("| http | add_sub | 8 | thaw | 400.0 |")
