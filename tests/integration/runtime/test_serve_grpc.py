"""`thaw serve` speaks Triton's gRPC protocol to tritonclient.grpc (sync and aio) and raw
grpc.aio stubs, unchanged: every method, every datatype, the same errors and statistics as
over HTTP, streams, deadlines, and hostile input that leaves the server serving."""

from __future__ import annotations

import asyncio
import queue
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
import tritonclient.http as httpclient
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.fixtures.serve_process import ServeProcess
from tests.integration.runtime.server_limits import MAX_BODY_BYTES
from tests.support.bytes_served import bytes_served
from tests.support.datatype_samples import SAMPLES
from thawwire.extensions import EXTENSIONS

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def grpc_client(runtime_server: ServeProcess) -> Iterator[grpcclient.InferenceServerClient]:
    assert runtime_server.grpc_address, runtime_server.stdout_lines
    client = grpcclient.InferenceServerClient(runtime_server.grpc_address)
    yield client
    client.close()


def _add_sub_inputs(n: int = 4) -> tuple[list[grpcclient.InferInput], np.ndarray, np.ndarray]:
    a = np.arange(n, dtype=np.float32)
    b = np.full(n, 0.5, dtype=np.float32)
    inputs = [
        grpcclient.InferInput("INPUT0", [n], "FP32"),
        grpcclient.InferInput("INPUT1", [n], "FP32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs, a, b


def _slow_input(delay_s: float) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("DELAY_S", [1], "FP32")
    tensor.set_data_from_numpy(np.array([delay_s], dtype=np.float32))
    return [tensor]


def _status(info: pytest.ExceptionInfo[InferenceServerException]) -> str:
    return str(info.value.status())


# ---- health, metadata, config, repository -------------------------------------------------


def test_health_metadata_and_config(grpc_client: grpcclient.InferenceServerClient) -> None:
    assert grpc_client.is_server_live() and grpc_client.is_server_ready()
    meta = grpc_client.get_server_metadata()
    assert meta.name == "triton" and list(meta.extensions) == list(EXTENSIONS)
    assert grpc_client.is_model_ready("add_sub")
    assert not grpc_client.is_model_ready("grpc_spare")  # known, not loaded
    model = grpc_client.get_model_metadata("add_sub", as_json=True)
    assert [i["name"] for i in model["inputs"]] == ["INPUT0", "INPUT1"]
    assert model["platform"] == "python" and model["versions"] == ["1"]
    config = grpc_client.get_model_config("add_onnx", as_json=True)["config"]
    assert [i["name"] for i in config["input"]] == ["A", "B"]


def test_the_standard_health_service_says_serving(runtime_server: ServeProcess) -> None:
    """grpc.health.v1, as Kubernetes' gRPC probes and grpc_health_probe call it."""
    with grpc.insecure_channel(runtime_server.grpc_address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        answer = health.Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as info:
            next(iter(health.Watch(health_pb2.HealthCheckRequest(), timeout=10)))
        assert info.value.code() is grpc.StatusCode.UNIMPLEMENTED  # as Triton 2.51


def test_answers_equal_the_http_ones(
    grpc_client: grpcclient.InferenceServerClient, client: httpclient.InferenceServerClient
) -> None:
    grpc_meta = grpc_client.get_model_metadata("scale_torch", as_json=True)
    http_meta = client.get_model_metadata("scale_torch")
    assert grpc_meta["inputs"] == [
        {"name": i["name"], "datatype": i["datatype"], "shape": [str(d) for d in i["shape"]]}
        for i in http_meta["inputs"]
    ]  # MessageToJson writes int64 as strings
    for model in ("add_onnx", "add_sub", "scale_torch"):
        grpc_config = grpc_client.get_model_config(model).config
        http_config = json_format.ParseDict(
            client.get_model_config(model), model_config_pb2.ModelConfig()
        )
        assert grpc_config == http_config  # every field, the same config
    grpc_index = grpc_client.get_model_repository_index(as_json=True)["models"]
    assert {r["name"] for r in grpc_index} == {
        r["name"] for r in client.get_model_repository_index()
    }


def test_unknown_models_and_versions_are_not_found(
    grpc_client: grpcclient.InferenceServerClient,
) -> None:
    for call in (
        lambda: grpc_client.get_model_metadata("no_such_model"),
        lambda: grpc_client.get_model_config("add_sub", model_version="9"),
        lambda: grpc_client.infer("no_such_model", _add_sub_inputs()[0]),
    ):
        with pytest.raises(InferenceServerException) as info:
            call()
        assert _status(info) == "StatusCode.NOT_FOUND"
    # ModelReady is the exception: Triton 2.51 answers ready=false, never NOT_FOUND.
    assert not grpc_client.is_model_ready("no_such_model")
    assert not grpc_client.is_model_ready("../etc")


def test_load_and_unload_follow_the_control_mode(
    grpc_client: grpcclient.InferenceServerClient,
) -> None:
    grpc_client.load_model("grpc_spare")
    assert grpc_client.is_model_ready("grpc_spare")
    inputs, a, b = _add_sub_inputs()
    np.testing.assert_array_equal(
        grpc_client.infer("grpc_spare", inputs).as_numpy("OUTPUT0"), a + b
    )
    grpc_client.unload_model("grpc_spare")
    assert not grpc_client.is_model_ready("grpc_spare")
    with pytest.raises(InferenceServerException) as info:
        grpc_client.infer("grpc_spare", inputs)
    # Triton's code and words for a model unloaded on request (vllm_backend's CI asserts them).
    assert _status(info) == "StatusCode.NOT_FOUND"
    assert "Request for unknown model: 'grpc_spare' has no available versions" in str(info.value)
    with pytest.raises(InferenceServerException) as info:
        grpc_client.load_model("no_such_model")
    assert _status(info) == "StatusCode.NOT_FOUND"
    with pytest.raises(InferenceServerException, match="must be relative"):
        grpc_client.load_model("grpc_spare", config="{}", files={"file:../x": b"1"})


@pytest.mark.parametrize(("level", "compressed"), [("none", False), ("high", True)])
def test_responses_are_compressed_at_tritonserver_s_level(
    start_serve: Any, tmp_path: Any, level: str, compressed: bool
) -> None:
    """qa/L0_grpc: `--grpc-infer-response-compression-level=high`, then
    simple_grpc_infer_client.py; a response of 1 MiB of zeros crosses the wire compressed."""
    from tests.fixtures.models import make_python_identity

    make_python_identity(tmp_path)
    server = start_serve(tmp_path, f"--grpc-infer-response-compression-level={level}")
    zeros = np.zeros(1 << 18, dtype=np.float32)

    def infer(address: str) -> None:
        with grpcclient.InferenceServerClient(address) as client:
            tensor = grpcclient.InferInput("INPUT0", [zeros.size], "FP32")
            tensor.set_data_from_numpy(zeros)
            out = client.infer("identity_python", [tensor]).as_numpy("OUTPUT0")
            np.testing.assert_array_equal(out, zeros)

    served = bytes_served(server.grpc_address, infer)
    assert (served < zeros.nbytes // 10) is compressed, served


def test_load_is_refused_outside_explicit_mode(start_serve: Any, tmp_path: Any) -> None:
    from tests.fixtures.models import make_add_sub

    make_add_sub(tmp_path)
    server = start_serve(tmp_path)  # control mode none
    with grpcclient.InferenceServerClient(server.grpc_address) as c:
        with pytest.raises(InferenceServerException) as info:
            c.load_model("add_sub")
        assert _status(info) == "StatusCode.UNAVAILABLE"  # Triton's code
        assert "explicit model load / unload is not allowed" in info.value.message()


# ---- inference ----------------------------------------------------------------------------


@pytest.mark.parametrize("datatype", sorted(SAMPLES))
def test_every_datatype_round_trips(
    grpc_client: grpcclient.InferenceServerClient, datatype: str
) -> None:
    data = SAMPLES[datatype]
    tensor = grpcclient.InferInput("INPUT0", list(data.shape), datatype)
    tensor.set_data_from_numpy(data)
    result = grpc_client.infer(f"identity_{datatype.lower()}", [tensor])
    out = result.as_numpy("OUTPUT0")
    if datatype == "BYTES":
        assert list(out) == list(data)
    else:
        np.testing.assert_array_equal(out, data)
    assert result.get_output("OUTPUT0").datatype == datatype


def test_bf16_travels_as_raw_words(runtime_server: ServeProcess) -> None:
    # BF16 has no numpy dtype; tritonclient sends its 2-byte words raw. The FP32 identity
    # model refuses it by datatype, with HTTP's message: the wire format was understood.
    message = service_pb2.ModelInferRequest(model_name="identity_fp32")
    message.inputs.add(name="INPUT0", datatype="BF16", shape=[2])
    message.raw_input_contents.append(np.array([0x3F80, 0x4000], np.uint16).tobytes())

    async def call() -> None:
        async with grpc.aio.insecure_channel(runtime_server.grpc_address) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.ModelInfer(message)
            assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert "data-type is 'BF16', but model 'identity_fp32' expects 'FP32'" in (
                info.value.details() or ""
            )

    asyncio.run(call())


def test_add_sub_with_id_parameters_and_requested_outputs(
    grpc_client: grpcclient.InferenceServerClient,
) -> None:
    inputs, a, b = _add_sub_inputs()
    outputs = [grpcclient.InferRequestedOutput("OUTPUT1")]
    result = grpc_client.infer(
        "add_sub", inputs, outputs=outputs, request_id="req-7", priority=1, timeout=10_000_000,
        parameters={"custom_key": "v"},
    )  # fmt: skip
    response = result.get_response()
    assert response.id == "req-7" and response.model_version == "1"
    assert [o.name for o in response.outputs] == ["OUTPUT1"]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_classification_over_grpc(grpc_client: grpcclient.InferenceServerClient) -> None:
    inputs, _, _ = _add_sub_inputs()
    result = grpc_client.infer(
        "add_sub", inputs, outputs=[grpcclient.InferRequestedOutput("OUTPUT0", class_count=2)]
    )
    assert [x.decode() for x in result.as_numpy("OUTPUT0")] == ["3.500000:3", "2.500000:2"]


def test_errors_and_statistics_agree_with_http(
    grpc_client: grpcclient.InferenceServerClient, client: httpclient.InferenceServerClient
) -> None:
    before = client.get_inference_statistics("add_sub")["model_stats"][0]["inference_count"]
    for _ in range(3):
        grpc_client.infer("add_sub", _add_sub_inputs()[0])
    grpc_row = grpc_client.get_inference_statistics("add_sub", as_json=True)["model_stats"][0]
    http_row = client.get_inference_statistics("add_sub")["model_stats"][0]
    assert int(grpc_row["inference_count"]) == http_row["inference_count"] == before + 3
    assert (
        int(grpc_row["inference_stats"]["success"]["count"])
        == (http_row["inference_stats"]["success"]["count"])
    )
    # One bad request, both ways: the same words.
    bad = grpcclient.InferInput("INPUT0", [3], "FP32")
    bad.set_data_from_numpy(np.zeros(3, np.float32))
    with pytest.raises(InferenceServerException) as grpc_error:
        grpc_client.infer("add_sub", [bad, _add_sub_inputs()[0][1]])
    http_bad = [
        httpclient.InferInput("INPUT0", [3], "FP32"),
        httpclient.InferInput("INPUT1", [4], "FP32"),
    ]
    http_bad[0].set_data_from_numpy(np.zeros(3, np.float32))
    http_bad[1].set_data_from_numpy(np.zeros(4, np.float32))
    with pytest.raises(InferenceServerException) as http_error:
        client.infer("add_sub", http_bad)
    assert _status(grpc_error) == "StatusCode.INVALID_ARGUMENT"
    assert grpc_error.value.message() == http_error.value.message()
    assert "unexpected shape for input 'INPUT0'" in grpc_error.value.message()
    with pytest.raises(InferenceServerException) as info:
        grpc_client.infer("execute_error", [_float_input("INPUT0", [1.0])])
    assert _status(info) == "StatusCode.INTERNAL"
    assert "execute_error always fails" in info.value.message()


def _float_input(name: str, values: list[float]) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, [len(values)], "FP32")
    tensor.set_data_from_numpy(np.array(values, dtype=np.float32))
    return tensor


def test_deadline_is_honoured_and_the_server_goes_on(
    grpc_client: grpcclient.InferenceServerClient,
) -> None:
    started = time.monotonic()
    with pytest.raises(InferenceServerException) as info:
        grpc_client.infer("slow", _slow_input(2.0), client_timeout=0.3)
    assert _status(info) == "StatusCode.DEADLINE_EXCEEDED"
    # Held until the deadline, then ended by it, not refused at once (an upper bound under
    # the 2 s execution was one a loaded machine outlasts; the deadline bounds the call).
    assert time.monotonic() - started >= 0.3
    inputs, a, b = _add_sub_inputs()
    np.testing.assert_array_equal(grpc_client.infer("add_sub", inputs).as_numpy("OUTPUT0"), a + b)


def test_aio_client_infers_and_streams(runtime_server: ServeProcess) -> None:
    async def run() -> None:
        client = aioclient.InferenceServerClient(runtime_server.grpc_address)
        try:
            assert await client.is_server_ready()
            inputs, a, b = _add_sub_inputs()
            result = await client.infer("add_sub", inputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)

            async def requests() -> AsyncIterator[dict[str, Any]]:
                for i in range(3):
                    yield {"model_name": "add_sub", "inputs": inputs, "request_id": f"a{i}"}

            seen = []
            async for answer, error in client.stream_infer(requests()):
                assert error is None
                seen.append(answer.get_response().id)
                np.testing.assert_array_equal(answer.as_numpy("OUTPUT1"), a - b)
                if len(seen) == 3:
                    break
            assert seen == ["a0", "a1", "a2"]
        finally:
            await client.close()

    asyncio.run(run())


def test_raw_stubs_with_raw_input_contents(runtime_server: ServeProcess) -> None:
    async def run() -> None:
        async with grpc.aio.insecure_channel(runtime_server.grpc_address) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            assert (await stub.ServerLive(service_pb2.ServerLiveRequest())).live
            message = service_pb2.ModelInferRequest(model_name="add_sub", id="raw")
            for name in ("INPUT0", "INPUT1"):
                message.inputs.add(name=name, datatype="FP32", shape=[4])
                message.raw_input_contents.append(np.full(4, 2, np.float32).tobytes())
            response = await stub.ModelInfer(message)
            assert [o.name for o in response.outputs] == ["OUTPUT0", "OUTPUT1"]
            out = np.frombuffer(response.raw_output_contents[0], dtype=np.float32)
            np.testing.assert_array_equal(out, np.full(4, 4, np.float32))
            typed = service_pb2.ModelInferRequest(model_name="add_sub")
            for name in ("INPUT0", "INPUT1"):
                typed.inputs.add(
                    name=name, datatype="FP32", shape=[4]
                ).contents.fp32_contents.extend([1, 2, 3, 4])
            response = await stub.ModelInfer(typed)
            assert np.frombuffer(response.raw_output_contents[1], np.float32).tolist() == [0] * 4
            # Both ways at once, fewer raw entries than inputs (grpc_explicit_int_content_client
            # of Triton's examples): Triton's words about the first such input, not a count.
            typed.raw_input_contents.append(np.zeros(2, np.float32).tobytes())
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.ModelInfer(typed)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert refused.value.details() == (
                "contents field must not be specified when using raw_input_contents for "
                "'INPUT0' for model 'add_sub'"
            )
            stats = await stub.ModelStatistics(service_pb2.ModelStatisticsRequest(name=""))
            assert {s.name for s in stats.model_stats} >= {"add_sub", "identity_fp32"}

    asyncio.run(run())


# ---- streams ------------------------------------------------------------------------------


def test_stream_answers_in_request_order_with_errors_in_stream(
    grpc_client: grpcclient.InferenceServerClient,
) -> None:
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    grpc_client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        inputs, _, _ = _add_sub_inputs()
        # The slow request is first: the quick ones behind it wait for it (Triton writes a
        # non-decoupled model's answers in request order).
        grpc_client.async_stream_infer("slow", _slow_input(0.5), request_id="slow")
        grpc_client.async_stream_infer("add_sub", inputs, request_id="quick")
        bad = _float_input("INPUT0", [1.0, 2.0, 3.0])
        grpc_client.async_stream_infer("add_sub", [bad, inputs[1]], request_id="bad")
        grpc_client.async_stream_infer("no_such_model", inputs, request_id="unknown")
        grpc_client.async_stream_infer("add_sub", inputs, request_id="after")
        got = [answers.get(timeout=30) for _ in range(5)]
    finally:
        grpc_client.stop_stream()
    ids = [r.get_response().id if r is not None else None for r, _ in got]
    assert ids[:2] == ["slow", "quick"] and ids[4] == "after"
    errors = [e for _, e in got if e is not None]
    assert len(errors) == 2
    assert "unexpected shape for input 'INPUT0'" in errors[0].message()
    assert "Request for unknown model: 'no_such_model' is not found" in errors[1].message()
    final = got[0][0].get_response().parameters["triton_final_response"]
    assert final.bool_param is True


def test_triton_grpc_error_header_still_answers_a_refused_request_in_stream(
    runtime_server: ServeProcess,
) -> None:
    # Triton 2.51 ends such a stream on a model's error (test_triton_parity_requests.py), not
    # on a request it refuses before running it: that one is answered in-stream.
    async def run() -> None:
        async with grpc.aio.insecure_channel(runtime_server.grpc_address) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            call = stub.ModelStreamInfer(metadata=(("triton_grpc_error", "true"),))
            await call.write(service_pb2.ModelInferRequest(model_name="add_sub", id="noinputs"))
            await call.done_writing()
            answers = [answer async for answer in call]
            assert [a.infer_response.id for a in answers] == ["noinputs"]
            assert "expected 2 inputs but got 0 inputs for model 'add_sub'" in (
                answers[0].error_message
            )
            assert await call.code() is grpc.StatusCode.OK

    asyncio.run(run())


# ---- hostile input ------------------------------------------------------------------------


def test_a_message_over_the_cap_is_resource_exhausted(
    grpc_client: grpcclient.InferenceServerClient,
) -> None:
    n = MAX_BODY_BYTES // 4 + 16
    inputs, _, _ = _add_sub_inputs(n)
    with pytest.raises(InferenceServerException) as info:
        grpc_client.infer("add_sub", inputs)
    assert _status(info) == "StatusCode.RESOURCE_EXHAUSTED"
    assert grpc_client.is_server_live()
    np.testing.assert_array_equal(
        grpc_client.infer("add_sub", _add_sub_inputs()[0]).as_numpy("OUTPUT0"),
        np.arange(4, dtype=np.float32) + 0.5,
    )


def test_garbage_and_lying_messages_are_invalid_argument(runtime_server: ServeProcess) -> None:
    async def run() -> None:
        async with grpc.aio.insecure_channel(runtime_server.grpc_address) as channel:
            infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
            metadata = channel.unary_unary("/inference.GRPCInferenceService/ModelMetadata")
            for call in (infer, metadata):
                for data in (b"\x0a\xff\xff\xff\xff\x0f", b"\xff" * 64):
                    with pytest.raises(grpc.aio.AioRpcError) as info:
                        await call(data)
                    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
                    assert "could not be parsed" in (info.value.details() or "")
            # A shape whose bytes overflow, and raw contents that lie about their size.
            lying = service_pb2.ModelInferRequest(model_name="identity_fp32")
            lying.inputs.add(name="INPUT0", datatype="FP32", shape=[1 << 61])
            lying.raw_input_contents.append(b"\x00" * 8)
            short = service_pb2.ModelInferRequest(model_name="identity_fp32")
            short.inputs.add(name="INPUT0", datatype="FP32", shape=[1000])
            short.raw_input_contents.append(b"\x00" * 8)
            for message in (lying, short):
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await infer(message.SerializeToString())
                assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            assert (await stub.ServerReady(service_pb2.ServerReadyRequest())).ready

    asyncio.run(run())


def test_endless_and_abandoned_streams_leave_the_server_serving(
    runtime_server: ServeProcess, grpc_client: grpcclient.InferenceServerClient
) -> None:
    async def run() -> None:
        async with grpc.aio.insecure_channel(runtime_server.grpc_address) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            endless = stub.ModelStreamInfer()  # never half-closed
            abandoned = stub.ModelStreamInfer()
            message = service_pb2.ModelInferRequest(model_name="slow", id="s")
            message.inputs.add(name="DELAY_S", datatype="FP32", shape=[1])
            message.raw_input_contents.append(np.array([0.3], np.float32).tobytes())
            await endless.write(message)
            answer = await endless.read()
            assert answer.infer_response.id == "s" and not answer.error_message
            for _ in range(5):
                await abandoned.write(message)
            abandoned.cancel()  # the client goes away with requests in flight
            flood = stub.ModelStreamInfer()
            quick = service_pb2.ModelInferRequest(model_name="identity_fp32")
            quick.inputs.add(name="INPUT0", datatype="FP32", shape=[1])
            quick.raw_input_contents.append(b"\x00" * 4)
            for _ in range(600):  # more than one stream serves at once: the rest wait, bounded
                await flood.write(quick)
            await flood.done_writing()
            answers = [a async for a in flood]
            assert len(answers) == 600 and not any(a.error_message for a in answers)
            endless.cancel()

    asyncio.run(run())
    inputs, a, b = _add_sub_inputs()
    np.testing.assert_array_equal(grpc_client.infer("add_sub", inputs).as_numpy("OUTPUT0"), a + b)
    assert grpc_client.is_server_ready()
