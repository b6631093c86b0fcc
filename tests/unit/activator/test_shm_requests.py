"""`thaw up`'s rewrites of requests naming shared-memory regions: inputs become binary tensor
data (REST) or raw contents (gRPC) in input order, shm outputs are asked for as binary data,
and the replica's answer is written into the regions and left out of the client's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from activator.errors import BadRequest
from activator.surfaces.shm_requests import (
    StreamRegions,
    grpc_answer,
    grpc_request,
    rest_answer,
    rest_request,
)
from thawserver.shm_registry import SystemSharedMemory
from thawwire.grpc_service import pb

A = np.arange(4, dtype=np.float32)
B = np.full(4, 0.5, dtype=np.float32)


@pytest.fixture
def registry(tmp_path: Path) -> SystemSharedMemory:
    registry = SystemSharedMemory(shm_dir=tmp_path)
    (tmp_path / "in0").write_bytes(A.tobytes())
    (tmp_path / "out").write_bytes(b"\0" * 32)
    registry.register("in0", "/in0", 0, 16)
    registry.register("out", "/out", 0, 32)
    return registry


def _shm(region: str, size: int, offset: int = 0) -> dict[str, object]:
    params: dict[str, object] = {"shared_memory_region": region, "shared_memory_byte_size": size}
    if offset:
        params["shared_memory_offset"] = offset
    return params


def test_rest_inputs_keep_their_order_and_outputs_come_back_in_regions(
    registry: SystemSharedMemory, tmp_path: Path
) -> None:
    header = {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [4], "parameters": _shm("in0", 16)},
            {"name": "INPUT1", "datatype": "FP32", "shape": [4],
             "parameters": {"binary_data_size": 16}},
        ],
        "outputs": [
            {"name": "OUTPUT0", "parameters": _shm("out", 16, offset=16)},
            {"name": "OUTPUT1", "parameters": {"binary_data": True}},
        ],
    }  # fmt: skip
    head = json.dumps(header).encode()
    out = rest_request(head + B.tobytes(), len(head), registry, "add_sub")
    assert out is not None and out.header_length is not None
    sent = json.loads(out.body[: out.header_length])
    assert out.body[out.header_length :] == A.tobytes() + B.tobytes()
    assert sent["inputs"][0]["parameters"] == {"binary_data_size": 16}
    assert sent["outputs"][0]["parameters"] == {"binary_data": True}
    with pytest.raises(Exception, match="in use"):
        registry.unregister("out")
    replica = {
        "model_name": "add_sub",
        "outputs": [
            {"name": "OUTPUT0", "datatype": "FP32", "shape": [4],
             "parameters": {"binary_data_size": 16}},
            {"name": "OUTPUT1", "datatype": "FP32", "shape": [4],
             "parameters": {"binary_data_size": 16}},
        ],
    }  # fmt: skip
    rhead = json.dumps(replica).encode()
    body, length = rest_answer(rhead + (A + B).tobytes() + (A - B).tobytes(), len(rhead), out)
    out.release()
    assert length is not None and body[length:] == (A - B).tobytes()
    answer = json.loads(body[:length])
    assert answer["outputs"][0] == {"name": "OUTPUT0", "datatype": "FP32", "shape": [4]}
    assert (tmp_path / "out").read_bytes() == b"\0" * 16 + (A + B).tobytes()
    registry.unregister("out")  # released: free again


def test_a_body_that_names_no_region_after_all_is_forwarded_as_it_came(
    registry: SystemSharedMemory,
) -> None:
    body = json.dumps({"inputs": [{"name": "shared_memory_region", "data": [1]}]}).encode()
    assert rest_request(body, None, registry, "m") is None
    assert rest_request(b"not json shared_memory_region", None, registry, "m") is None


def test_rest_refusals_release_what_they_leased(registry: SystemSharedMemory) -> None:
    header = {
        "inputs": [
            {"name": "I", "datatype": "FP32", "shape": [4], "parameters": _shm("in0", 16)},
            {"name": "J", "datatype": "FP32", "shape": [2], "parameters": _shm("in0", 16)},
        ]
    }
    with pytest.raises(BadRequest, match="input byte size mismatch for input 'J' for model 'm'"):
        rest_request(json.dumps(header).encode(), None, registry, "m")
    header["inputs"][1] = {"name": "J", "shape": [4], "parameters": _shm("gone", 16)}
    with pytest.raises(BadRequest, match="Unable to find shared memory region: 'gone'"):
        rest_request(json.dumps(header).encode(), None, registry, "m")
    registry.unregister_all()  # nothing left in use


def test_grpc_inputs_become_raw_contents_and_outputs_regions(
    registry: SystemSharedMemory, tmp_path: Path
) -> None:
    message = pb.ModelInferRequest(model_name="add_sub")
    first = message.inputs.add(name="INPUT0", datatype="FP32", shape=[4])
    first.parameters["shared_memory_region"].string_param = "in0"
    first.parameters["shared_memory_byte_size"].int64_param = 16
    message.inputs.add(name="INPUT1", datatype="FP32", shape=[4])
    message.raw_input_contents.append(B.tobytes())
    wanted = message.outputs.add(name="OUTPUT0")
    wanted.parameters["shared_memory_region"].string_param = "out"
    wanted.parameters["shared_memory_byte_size"].int64_param = 16
    out = grpc_request(message.SerializeToString(), registry)
    assert out is not None
    sent = pb.ModelInferRequest.FromString(out.body)
    assert list(sent.raw_input_contents) == [A.tobytes(), B.tobytes()]
    assert not sent.inputs[0].parameters and not sent.outputs[0].parameters
    response = pb.ModelInferResponse(model_name="add_sub")
    response.outputs.add(name="OUTPUT0", datatype="FP32", shape=[4])
    response.raw_output_contents.append((A + B).tobytes())
    answer = pb.ModelInferResponse.FromString(grpc_answer(response.SerializeToString(), out))
    out.release()
    assert list(answer.raw_output_contents) == [b""]
    assert (tmp_path / "out").read_bytes()[:16] == (A + B).tobytes()
    plain = pb.ModelInferRequest(model_name="m", id="shared_memory_region")
    assert grpc_request(plain.SerializeToString(), registry) is None


_NOT_A_SIZE = (
    "Unable to parse 'binary_data_size': attempt to access JSON non-unsigned-integer as "
    "unsigned-integer (input 'INPUT1')"
)


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (32, "unexpected size for input 'INPUT1', expecting 16 additional bytes for model 'm'"),
        (-1, _NOT_A_SIZE),
        ("16", _NOT_A_SIZE),
    ],
)
def test_a_binary_section_that_does_not_add_up_is_refused_in_thaw_serves_words(
    registry: SystemSharedMemory, size: object, text: str
) -> None:
    header = {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [4], "parameters": _shm("in0", 16)},
            {"name": "INPUT1", "datatype": "FP32", "shape": [8],
             "parameters": {"binary_data_size": size}},
        ],
    }  # fmt: skip
    head = json.dumps(header).encode()
    with pytest.raises(BadRequest) as refused:
        rest_request(head + B.tobytes(), len(head), registry, "m")
    assert refused.value.message == text


def _stream_request(request_id: str, region: str) -> bytes:
    message = pb.ModelInferRequest(model_name="dec", id=request_id)
    message.inputs.add(name="INPUT0", datatype="FP32", shape=[4])
    message.raw_input_contents.append(A.tobytes())
    wanted = message.outputs.add(name="OUTPUT0")
    wanted.parameters["shared_memory_region"].string_param = region
    wanted.parameters["shared_memory_byte_size"].int64_param = 16
    return message.SerializeToString()


def _stream_answer(request_id: str, data: np.ndarray, *, final: bool) -> bytes:
    answer = pb.ModelStreamInferResponse()
    response = answer.infer_response
    response.id, response.model_name = request_id, "dec"
    response.outputs.add(name="OUTPUT0", datatype="FP32", shape=[4])
    response.raw_output_contents.append(data.tobytes())
    response.parameters["triton_final_response"].bool_param = final
    return answer.SerializeToString()


def test_a_streams_answers_find_their_requests_regions_by_id(
    registry: SystemSharedMemory, tmp_path: Path
) -> None:
    """Two requests with the same client id on one stream, a decoupled model answering the
    second first and the first twice: each answer's bytes go to its own request's region, the
    client's id comes back, and each request's leases end with its final answer."""
    (tmp_path / "out2").write_bytes(b"\0" * 16)
    registry.register("out2", "/out2", 0, 16)
    regions = StreamRegions()
    sent = [pb.ModelInferRequest.FromString(regions.request(_stream_request("same", r), registry))
            for r in ("out", "out2")]  # fmt: skip
    tokens = [s.id for s in sent]
    assert len(set(tokens)) == 2 and "same" not in tokens
    assert not sent[0].outputs[0].parameters  # asked for as raw contents
    back = pb.ModelStreamInferResponse.FromString(
        regions.answer(_stream_answer(tokens[1], B, final=True))
    )
    assert back.infer_response.id == "same" and list(back.infer_response.raw_output_contents) == [
        b""
    ]
    assert (tmp_path / "out2").read_bytes() == B.tobytes()
    registry.unregister("out2")  # its request is done: no longer in use
    regions.answer(_stream_answer(tokens[0], A, final=False))
    assert (tmp_path / "out").read_bytes()[:16] == A.tobytes()
    with pytest.raises(Exception, match="in use"):
        registry.unregister("out")  # the first request still runs
    regions.answer(_stream_answer(tokens[0], A + B, final=True))
    assert (tmp_path / "out").read_bytes()[:16] == (A + B).tobytes()
    untouched = _stream_answer("other", A, final=True)
    assert regions.answer(untouched) == untouched  # not one of ours: as it came
    registry.unregister("out")


def test_a_stream_that_ends_early_releases_what_its_requests_leased(
    registry: SystemSharedMemory,
) -> None:
    regions = StreamRegions()
    regions.request(_stream_request("r", "out"), registry)
    regions.close()
    registry.unregister_all()  # nothing left in use
    with pytest.raises(BadRequest, match="Unable to find shared memory region"):
        regions.request(_stream_request("r", "gone"), registry)
