"""A request through `thaw serve` is freed when it is answered, not by the garbage collector.

A reference cycle through a request (a callback bound to it, stored in it) leaves the whole
request (headers, message, payload, state) to the collector: measured on the warm path, that
was a tenth of its CPU per request. Each request kind below runs 50 times with the collector
off; none of the requests (HTTP), and nothing of Thaw's (gRPC), may be among what it then
finds. (grpcio leaves a few objects of its own per call, in its method lookup: not Thaw's.)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from aiohttp.test_utils import TestClient, TestServer

from runtime.config import ModelControlMode, ServeConfig
from runtime.grpc.handlers import GrpcHandlers
from runtime.grpc.server import GrpcServer
from runtime.http.app import RUNNER_OPTIONS, build_app
from runtime.models.lifecycle import ServerState
from runtime.models.manager import ModelManager
from runtime.observe.metrics import Metrics
from tests.fixtures.models import make_add_sub
from tests.fixtures.onnx_models import make_identity_fp32
from tests.support.request_garbage import (
    left_to_collector,
    requests_left_to_collector,
    thaw_objects,
)
from thawwire.grpc_service import pb

_IN_PROCESS = '\nparameters { key: "thaw.python_runtime" value { string_value: "in_process" } }\n'


_MODELS = ["add_sub", "add_sub_inline", "identity"]


def _config(repository: Path) -> ServeConfig:
    make_add_sub(repository)  # in its stub process (the default)
    inline = make_add_sub(repository, "add_sub_inline")
    (inline / "config.pbtxt").write_text((inline / "config.pbtxt").read_text() + _IN_PROCESS)
    make_identity_fp32(repository, "identity")
    return ServeConfig(
        repository=repository,
        model_control_mode=ModelControlMode.EXPLICIT,
        load_models=("*",),
        host="127.0.0.1",
        grpc_port=0,
    )


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[TestClient]:
    config = _config(tmp_path)
    metrics = Metrics()
    server = TestServer(build_app(config, ModelManager(config, metrics=metrics), metrics))
    await server.start_server(**RUNNER_OPTIONS)
    c = TestClient(server)
    for _ in range(1000):  # the models load in the background
        if (await c.get("/v2/health/ready")).status == 200:
            break
        await asyncio.sleep(0.02)
    yield c
    await c.close()


@pytest.fixture
async def grpc_channel(tmp_path: Path) -> AsyncIterator[grpc.aio.Channel]:
    """A channel to `thaw serve`'s gRPC servicer (its own server class), the models loaded."""
    config = _config(tmp_path)
    manager = ModelManager(config, metrics=Metrics())
    await manager.start()
    server = GrpcServer(config, GrpcHandlers(config, manager, ServerState()).routes())
    address = await server.start()
    try:
        for _ in range(1000):
            if all(manager.model_ready(m, None) for m in _MODELS):
                break
            await asyncio.sleep(0.02)
        async with grpc.aio.insecure_channel(address) as channel:
            yield channel
    finally:
        await server.stop(0)
        await manager.stop()


def _json_body(model: str) -> bytes:
    if model == "identity":
        inputs = [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]
    else:
        inputs = [
            {"name": f"INPUT{i}", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}
            for i in (0, 1)
        ]
    return json.dumps({"inputs": inputs}).encode()


@pytest.mark.parametrize("model", _MODELS)
async def test_infer_requests_leave_nothing_to_the_collector(
    client: TestClient, model: str
) -> None:
    body = _json_body(model)
    url = f"/v2/models/{model}/infer"
    assert (await client.post(url, data=body)).status == 200  # warm

    async def send() -> None:
        response = await client.post(url, data=body)
        assert response.status == 200, await response.text()
        await response.read()

    async def read_stats() -> None:  # and a control-plane read
        assert (await client.get(f"/v2/models/{model}/stats")).status == 200

    assert await requests_left_to_collector(send, 50) == 0
    assert await requests_left_to_collector(read_stats, 1) == 0


def _grpc_request(model: str) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model)
    names, shape = (["INPUT0"], [1, 4]) if model == "identity" else (["INPUT0", "INPUT1"], [4])
    for name in names:
        tensor = request.inputs.add(name=name, datatype="FP32", shape=shape)
        tensor.contents.fp32_contents.extend([1, 2, 3, 4])
    return request


@pytest.mark.parametrize("model", _MODELS)
async def test_grpc_infer_calls_leave_nothing_of_thaws_to_the_collector(
    grpc_channel: grpc.aio.Channel, model: str
) -> None:
    infer = grpc_channel.unary_unary(
        "/inference.GRPCInferenceService/ModelInfer",
        request_serializer=pb.ModelInferRequest.SerializeToString,
        response_deserializer=pb.ModelInferResponse.FromString,
    )
    request = _grpc_request(model)
    assert len((await infer(request)).outputs) >= 1  # warm

    async def send() -> None:
        response = await infer(request)
        assert response.model_name == model

    assert thaw_objects(await left_to_collector(send, 50)) == []
