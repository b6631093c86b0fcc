"""The v2 HTTP surface in-process, over a fake model service: routes, status codes, JSON errors."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry, Counter, generate_latest

from runtime.config import ModelControlMode, ServeConfig
from runtime.http.app import RUNNER_OPTIONS, build_app
from runtime.http.response_encoding import MIN_COMPRESS_BYTES
from tests.fakes.model_service import FakeModelService
from thawwire.extensions import EXTENSIONS
from thawwire.model_control import NOT_LOADED

ADD_SUB = {
    "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [2], "data": [1.0, 2.0]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [2], "data": [0.5, 0.5]},
    ]
}


class FakeMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("nv_inference_request_success", "ok", registry=self.registry)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def _config(**overrides: object) -> ServeConfig:
    base = ServeConfig(
        repository=Path("."),
        model_control_mode=ModelControlMode.EXPLICIT,
        max_body_bytes=64 * 1024,
        max_json_depth=16,
    )
    return replace(base, **overrides)  # type: ignore[arg-type]


async def _client(config: ServeConfig, service: FakeModelService) -> TestClient:
    app = build_app(config, service, FakeMetrics())
    server = TestServer(app)
    await server.start_server(**RUNNER_OPTIONS)
    client = TestClient(server)
    for _ in range(200):  # the manager starts in the background
        if (await client.get("/v2/health/ready")).status == 200:
            break
        await asyncio.sleep(0.01)
    return client


@pytest.fixture
async def service() -> FakeModelService:
    return FakeModelService()


@pytest.fixture
async def client(service: FakeModelService) -> AsyncIterator[TestClient]:
    c = await _client(_config(), service)
    yield c
    await c.close()
    assert service.stopped, "closing the app must stop the model manager"


async def _error(response, status: int) -> str:  # type: ignore[no-untyped-def]
    assert response.status == status
    assert response.content_type == "application/json"
    doc = await response.json()
    assert set(doc) == {"error"}
    return str(doc["error"])


async def test_health_and_server_metadata(client: TestClient) -> None:
    assert (await client.get("/v2/health/live")).status == 200
    assert (await client.get("/v2/health/ready")).status == 200
    assert (await client.head("/v2/health/live")).status == 200
    meta = await (await client.get("/v2")).json()
    assert meta["name"] == "triton"
    assert meta["extensions"] == list(EXTENSIONS)
    assert meta["version"]


async def test_not_ready_until_the_manager_has_started() -> None:
    service = FakeModelService()
    service.start_gate = asyncio.Event()
    app = build_app(_config(), service, FakeMetrics())
    async with TestClient(TestServer(app)) as c:
        assert (await c.get("/v2/health/live")).status == 200
        await _error(await c.get("/v2/health/ready"), 503)
        service.start_gate.set()  # the manager's start returns
        for _ in range(200):  # readiness follows as soon as the start task has run
            if (await c.get("/v2/health/ready")).status == 200:
                break
            await asyncio.sleep(0.01)
        assert (await c.get("/v2/health/ready")).status == 200


async def test_infer_json_round_trip(client: TestClient) -> None:
    doc = dict(ADD_SUB, id="abc")
    response = await client.post("/v2/models/add_sub/infer", json=doc)
    assert response.status == 200
    body = await response.json()
    assert body["id"] == "abc"
    assert {o["name"]: o["data"] for o in body["outputs"]} == {
        "OUTPUT0": [1.5, 2.5],
        "OUTPUT1": [0.5, 1.5],
    }


async def test_infer_binary_in_and_out_with_gzip_both_ways(client: TestClient) -> None:
    a = np.arange(2048, dtype=np.int16)  # 4 KiB back: worth compressing
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "INT16",
                    "shape": [2048],
                    "parameters": {"binary_data_size": a.nbytes},
                }
            ],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    response = await client.post(
        "/v2/models/identity/versions/1/infer",
        data=gzip.compress(header + a.tobytes()),
        headers={
            "Inference-Header-Content-Length": str(len(header)),
            "Content-Encoding": "gzip",
            "Accept-Encoding": "gzip",
        },
    )
    assert response.status == 200
    assert response.headers["Content-Encoding"] == "gzip"
    assert response.content_type == "application/octet-stream"
    body = await response.read()  # the client undoes Content-Encoding
    length = int(response.headers["Inference-Header-Content-Length"])
    out = json.loads(body[:length])["outputs"][0]
    assert out["parameters"]["binary_data_size"] == a.nbytes
    assert np.array_equal(np.frombuffer(body[length:], dtype=np.int16), a)


async def test_a_small_answer_is_sent_uncompressed_even_if_gzip_is_accepted(
    client: TestClient,
) -> None:
    # Compressing ~100 bytes costs ~50 µs of CPU (zlib's state setup) to save a few dozen bytes.
    response = await client.post(
        "/v2/models/add_sub/infer", json=ADD_SUB, headers={"Accept-Encoding": "gzip, deflate"}
    )
    assert response.status == 200
    assert "Content-Encoding" not in response.headers
    assert len(await response.read()) < MIN_COMPRESS_BYTES


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v2/models/nope", 404),
        ("GET", "/v2/models/nope/ready", 404),
        ("GET", "/v2/models/add_sub/versions/7/config", 404),
        ("GET", "/v2/models/add_sub/versions/x1/ready", 404),
        ("GET", "/v2/no/such/route", 404),
        ("GET", "/v2/models/add_sub/infer", 405),
        ("DELETE", "/v2/health/live", 405),
        ("POST", "/v2/models/%2E%2E/infer", 404),
        ("GET", "/v2/models/a%2Fb", 404),
        ("GET", "/v2/models/a%00b/ready", 404),
        ("GET", "/v2/models/%3Brm%20-rf/ready", 404),
        ("GET", "/v2/models/" + "m" * 300, 404),
        ("POST", "/v2/models/broken/infer", 500),
        ("POST", "/v2/models/crash/infer", 500),
    ],
)
async def test_errors_are_json_with_the_right_status(
    client: TestClient, method: str, path: str, status: int
) -> None:
    response = await client.request(method, path, json=ADD_SUB)
    await _error(response, status)
    if status == 405:
        assert response.headers["Allow"]
    assert (await client.get("/v2/health/ready")).status == 200


@pytest.mark.parametrize(
    ("body", "headers", "status"),
    [
        (b"{bad json", {}, 400),
        (b"[" * 20_000 + b"]" * 20_000, {}, 400),
        (gzip.compress(b" " * (10 * 1024 * 1024)), {"Content-Encoding": "gzip"}, 413),
        (b"x" * (65 * 1024), {}, 413),
        (b"{}", {"Content-Encoding": "br"}, 501),  # Triton's, for a coding it lacks
        (json.dumps(ADD_SUB).encode(), {"Inference-Header-Content-Length": "-5"}, 400),
        (json.dumps(ADD_SUB).encode(), {"Inference-Header-Content-Length": "99999"}, 400),
    ],
)
async def test_hostile_bodies_get_json_errors(
    client: TestClient, body: bytes, headers: dict[str, str], status: int
) -> None:
    response = await client.post("/v2/models/add_sub/infer", data=body, headers=headers)
    await _error(response, status)
    ok = await client.post("/v2/models/add_sub/infer", json=ADD_SUB)
    assert ok.status == 200


async def test_chunked_body_over_the_cap_is_413(client: TestClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(100):
            yield b"x" * 4096

    response = await client.post("/v2/models/add_sub/infer", data=chunks())
    await _error(response, 413)


async def test_model_ready_metadata_config_and_stats(client: TestClient) -> None:
    assert (await client.get("/v2/models/add_sub/ready")).status == 200
    assert (await (await client.get("/v2/models/add_sub")).json())["name"] == "add_sub"
    config = await (await client.get("/v2/models/add_sub/versions/1/config")).json()
    assert config["backend"] == "python"
    await client.post("/v2/models/add_sub/infer", json=ADD_SUB)
    stats = await (await client.get("/v2/models/add_sub/stats")).json()
    assert stats["model_stats"][0]["inference_count"] >= 1
    everything = await (await client.get("/v2/models/stats")).json()
    assert {s["name"] for s in everything["model_stats"]} >= {"add_sub", "identity"}


async def test_repository_index_load_and_unload(
    client: TestClient, service: FakeModelService
) -> None:
    index = await (await client.post("/v2/repository/index")).json()
    assert {row["name"] for row in index} == set(service.known)
    ready = await (await client.post("/v2/repository/index", json={"ready": True})).json()
    assert "slow" not in {row["name"] for row in ready}
    await _error(await client.post("/v2/repository/index", json={"ready": "yes"}), 400)

    assert (await client.post("/v2/repository/models/add_sub/unload")).status == 200
    await _error(await client.get("/v2/models/add_sub/ready"), 503)
    unloaded = await client.post("/v2/models/add_sub/infer", json=ADD_SUB)
    await _error(unloaded, 503)
    # Marked for `thaw up`: the request never reached the model (thawwire.model_control).
    assert unloaded.headers[NOT_LOADED] == "add_sub"
    body = {
        "parameters": {
            "config": '{"max_batch_size": 4}',
            "file:1/model.py": base64.b64encode(b"print(1)").decode(),
        }
    }
    assert (await client.post("/v2/repository/models/add_sub/load", json=body)).status == 200
    assert service.load_calls[-1] == (
        "add_sub",
        '{"max_batch_size": 4}',
        {"1/model.py": b"print(1)"},
    )
    assert (await client.get("/v2/models/add_sub/ready")).status == 200
    unload = {"parameters": {"unload_dependents": True}}
    assert (await client.post("/v2/repository/models/identity/unload", json=unload)).status == 200
    assert service.unload_calls[-1] == ("identity", True)


@pytest.mark.parametrize(
    "params",
    [
        {"config": "{not json"},
        {"config": 5},
        {"file:1/model.py": base64.b64encode(b"x").decode()},
        {"config": "{}", "file:../../etc/passwd": "eA=="},
        {"config": "{}", "file:/abs": "eA=="},
        {"config": "{}", "file:1/model.py": "%%%"},
    ],
)
async def test_bad_load_overrides_are_refused(client: TestClient, params: dict) -> None:
    response = await client.post("/v2/repository/models/add_sub/load", json={"parameters": params})
    await _error(response, 400)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("A" * 256, "has a component of 256 bytes; a file name can have at most 255"),
        ("1/" + "é" * 128, "has a component of 256 bytes"),
        ("1/" + "a/" * 2100 + "m", "is longer than 4095 bytes"),
        ("1/\ud800", "is not valid UTF-8"),
    ],
)
async def test_load_file_paths_the_disk_cannot_hold_are_400_before_loading(
    client: TestClient, service: FakeModelService, path: str, message: str
) -> None:
    body = json.dumps({"parameters": {"config": "{}", f"file:{path}": "YQ=="}})
    response = await client.post("/v2/repository/models/add_sub/load", data=body)
    error = await _error(response, 400)
    # Triton's text (its status is 500), then what is wrong with the path.
    assert error.startswith(
        "failed to load 'add_sub', failed to poll from model repository: load file path "
    )
    assert message in error
    assert service.load_calls == []
    assert (await client.get("/v2/health/ready")).status == 200


async def test_repository_index_ready_must_be_a_boolean_in_tritons_words(
    client: TestClient,
) -> None:
    expected = "Invalid value for 'ready': expected a boolean"
    for body in (b'{"ready": "yes"}', b'{"ready": ' + b"[" * 30_000 + b"]" * 30_000 + b"}"):
        response = await client.post("/v2/repository/index", data=body)
        assert await _error(response, 400) == expected
    # Nesting too deep elsewhere stays a nesting error (this app's cap is 16).
    deep = b'{"other": ' + b"[" * 20 + b"]" * 20 + b"}"
    error = await _error(await client.post("/v2/repository/index", data=deep), 400)
    assert error == "JSON nesting depth exceeds maximum allowed limit (16)"


@pytest.mark.parametrize(
    ("path", "headers", "message"),
    [
        ("/v2/repository/models/add_sub/load", {}, "request JSON size of 66560 bytes exceeds"),
        ("/v2/models/add_sub/infer", {}, "request JSON size of 66560 bytes exceeds"),
        (
            "/v2/models/add_sub/infer",
            {"Inference-Header-Content-Length": "0"},
            "request size of 66560 bytes exceeds",
        ),
    ],
)
async def test_bodies_over_the_cap_are_413_in_tritons_words(
    client: TestClient, path: str, headers: dict[str, str], message: str
) -> None:
    response = await client.post(path, data=b" " * (65 * 1024), headers=headers)
    error = await _error(response, 413)
    assert error.startswith(message)
    assert "maximum allowed input size of 65536 bytes" in error


async def test_load_and_unload_are_disabled_outside_explicit_mode() -> None:
    service = FakeModelService()
    c = await _client(_config(model_control_mode=ModelControlMode.NONE), service)
    try:
        await _error(await c.post("/v2/repository/models/add_sub/load"), 503)  # Triton's
        await _error(await c.post("/v2/repository/models/add_sub/unload"), 503)
        assert service.load_calls == []
    finally:
        await c.close()


async def test_metrics_are_prometheus_text(client: TestClient) -> None:
    response = await client.get("/metrics")
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    assert "nv_inference_request_success_total" in await response.text()


async def test_verbose_records_each_request_and_each_refusal(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    """As Triton's HTTP server at `--log-verbose 1`: a record per request, and a refused one's
    reason (its "Infer failed: ..."); nothing of either at the default level."""
    body = {"inputs": [{"name": "NOPE\n", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    with caplog.at_level(logging.INFO, logger="runtime.http.app"):
        assert (await client.post("/v2/models/add_sub/infer", json=body)).status == 400
    assert caplog.records == []
    with caplog.at_level(logging.DEBUG, logger="runtime.http.app"):
        assert (await client.post("/v2/models/add_sub/infer", json=body)).status == 400
    messages = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert messages[0] == (logging.DEBUG, "HTTP request: POST /v2/models/add_sub/infer")
    assert messages[1][0] == logging.DEBUG
    assert messages[1][1].startswith("POST /v2/models/add_sub/infer -> 400: model 'add_sub'")
