"""The runtime control client against a tiny fake runtime: readiness, load, unload, errors."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from activator.errors import ActivationFailed
from activator.scaler.runtime_control import (
    RuntimeControl,
    error_text,
    grown_sources,
    load_counts,
)
from tests.fakes.loop import HUNG_AFTER_S

CALLS = web.AppKey("calls", list[str])
LOADED = web.AppKey("loaded", set[str])
NOT_READY_FOR = web.AppKey("not_ready_for", list[int])  # readiness probes still answered 503
METRICS = web.AppKey("metrics", list[str])  # the text its /metrics answers


async def _health(request: web.Request) -> web.Response:
    left = request.app[NOT_READY_FOR]
    if left[0] != 0:  # negative: never ready
        left[0] -= 1
        return web.json_response({"error": "starting"}, status=503)
    return web.Response(status=200)


async def _model_ready(request: web.Request) -> web.Response:
    loaded = request.match_info["model"] in request.app[LOADED]
    return web.Response(status=200 if loaded else 400)


async def _control(request: web.Request) -> web.Response:
    model, action = request.match_info["model"], request.match_info["action"]
    request.app[CALLS].append(f"{action}:{model}")
    if model == "bad_weights":
        return web.json_response({"error": "failed to load 'bad_weights': truncated"}, status=400)
    if model == "plain":
        return web.Response(text="  upstream exploded \n", status=500)
    if model == "slow":
        await asyncio.sleep(5)
    if action == "load":
        request.app[LOADED].add(model)
    else:
        request.app[LOADED].discard(model)
    if model == "warmed":  # a model with `model_warmup` samples: the runtime says how long
        return web.Response(status=200, headers={"Thaw-Model-Warmup-Seconds": "1.250000"})
    return web.Response(status=200)


async def _metrics(request: web.Request) -> web.Response:
    return web.Response(text=request.app[METRICS][0])


@pytest.fixture
async def runtime() -> AsyncIterator[TestServer]:
    app = web.Application()
    app[CALLS] = []
    app[LOADED] = set()
    app[NOT_READY_FOR] = [3]
    app[METRICS] = [""]
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/v2/health/ready", _health)
    app.router.add_get("/v2/models/{model}/ready", _model_ready)
    app.router.add_post("/v2/repository/models/{model}/{action}", _control)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield server
    await server.close()


@pytest.fixture
async def control(runtime: TestServer) -> AsyncIterator[RuntimeControl]:
    async with aiohttp.ClientSession() as session:
        yield RuntimeControl(session, str(runtime.make_url("/")), name="pool-1")


async def test_waits_until_the_runtime_answers_ready(
    runtime: TestServer, control: RuntimeControl
) -> None:
    assert control.url == str(runtime.make_url("")).rstrip("/")  # no trailing slash
    assert not await control.is_ready()  # 503 while starting
    await control.wait_ready(time.monotonic() + 5)
    assert runtime.app is not None and runtime.app[NOT_READY_FOR] == [0]


async def test_a_runtime_never_ready_fails_at_the_deadline(
    runtime: TestServer, control: RuntimeControl
) -> None:
    assert runtime.app is not None
    runtime.app[NOT_READY_FOR][0] = -1
    start = time.monotonic()
    with pytest.raises(ActivationFailed, match="replica pool-1 was not ready in time"):
        await asyncio.wait_for(control.wait_ready(start + 0.3), HUNG_AFTER_S)  # never hung
    assert time.monotonic() - start >= 0.3  # polled until its deadline, not failed at once


async def test_load_unload_and_model_readiness(
    runtime: TestServer, control: RuntimeControl
) -> None:
    assert not await control.model_ready("add_sub")
    await control.load("add_sub", timeout_s=5)
    assert await control.model_ready("add_sub")
    await control.unload("add_sub", timeout_s=5)
    assert not await control.model_ready("add_sub")
    assert runtime.app is not None
    assert runtime.app[CALLS] == ["load:add_sub", "unload:add_sub"]


async def test_load_errors_carry_the_runtimes_own_message(control: RuntimeControl) -> None:
    with pytest.raises(ActivationFailed) as json_error:
        await control.load("bad_weights", timeout_s=5)
    assert json_error.value.message == (
        "model 'bad_weights' failed to load: failed to load 'bad_weights': truncated"
    )
    with pytest.raises(ActivationFailed) as plain:
        await control.load("plain", timeout_s=5)
    assert plain.value.message == "model 'plain' failed to load: upstream exploded"
    with pytest.raises(ActivationFailed) as slow:
        await control.load("slow", timeout_s=0.2)
    assert slow.value.message == "model 'slow' did not load within 0.2 s"


async def test_a_runtime_that_is_gone_is_a_failed_call_not_a_crash(unused_port: int) -> None:
    async with aiohttp.ClientSession() as session:
        gone = RuntimeControl(session, f"http://127.0.0.1:{unused_port}", name="pool-9")
        assert not await gone.is_ready()
        assert not await gone.model_ready("m")
        with pytest.raises(ActivationFailed, match="model 'm' load call failed"):
            await gone.load("m", timeout_s=HUNG_AFTER_S)  # refused, not timed out


def test_error_text_prefers_the_json_error() -> None:
    assert error_text('{"error": "boom"}') == "boom"
    assert error_text('{"error": 3}') == '{"error": 3}'
    assert error_text("  not json \n") == "not json"
    assert error_text("") == "(empty response)"


async def test_a_load_reports_the_models_warm_up_time(control: RuntimeControl) -> None:
    assert await control.load("warmed", timeout_s=5) == 1.25
    assert await control.load("add_sub", timeout_s=5) == 0.0  # no warm-up, no header


def test_load_counts_by_source_are_read_off_the_runtimes_metrics() -> None:
    text = (
        "# TYPE thaw_model_loads_total counter\n"
        'thaw_model_loads_total{model="a",source="host",version="1"} 2.0\n'
        'thaw_model_loads_total{model="a",source="host",version="2"} 1.0\n'
        'thaw_model_loads_total{model="a",source="store",version="1"} 1.0\n'
        'thaw_model_loads_total{model="ab",source="cache",version="1"} 5.0\n'
        'thaw_model_loads_created{model="a",source="host",version="1"} 1.7e9\n'
    )
    assert load_counts(text, "a") == {"host": 3.0, "store": 1.0}  # versions summed
    assert load_counts(text, "zz") == {}
    assert grown_sources({"host": 3.0, "store": 1.0}, {"host": 4.0, "store": 1.0}) == ["host"]
    assert grown_sources({}, {"files": 1.0}) == ["files"]


_GPU_METRICS = (
    "# TYPE nv_gpu_memory_total_bytes gauge\n"
    'nv_gpu_memory_total_bytes{gpu_uuid="GPU-a"} 8.0e+10\n'
    'nv_gpu_memory_total_bytes{gpu_uuid="GPU-b"} 8.0e+10\n'
    'nv_gpu_memory_used_bytes{gpu_uuid="GPU-a"} 3.0e+09\n'
    'nv_gpu_memory_used_bytes{gpu_uuid="GPU-b"} 1.0e+09\n'
    "thaw_server_resident_memory_bytes 5.0e+08\n"
)


@pytest.mark.parametrize(
    ("text", "gpus", "resident"),
    [
        (_GPU_METRICS, (160_000_000_000, 4_000_000_000), 500_000_000),  # summed over GPUs
        ("thaw_server_resident_memory_bytes 1.0e+08\n", None, 100_000_000),  # no GPU
        ("nv_gpu_memory_total_bytes 1e999\nthaw_server_resident_memory_bytes 1e999\n", None, None),
        ("", None, None),
    ],
)
async def test_gpu_memory_and_resident_memory_are_read_off_the_runtimes_metrics(
    runtime: TestServer,
    control: RuntimeControl,
    text: str,
    gpus: tuple[int, int] | None,
    resident: int | None,
) -> None:
    runtime.app[METRICS][0] = text
    assert await control.gpu_memory() == gpus
    assert await control.resident_bytes() == resident
