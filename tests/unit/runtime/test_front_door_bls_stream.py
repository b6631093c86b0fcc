"""runtime.direct.infer_wire's gRPC half: a BLS stream's request and responses as the messages
of `ModelStreamInfer` (runtime.codecs.protobuf's client direction), in-stream errors as
ServingError. (The HTTP half and the client itself: test_front_door_client.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from runtime.codecs.protobuf import (
    decode_model_infer,
    encode_model_infer,
    model_infer_request,
    model_infer_response,
)
from runtime.direct.infer_wire import stream_request, stream_response
from runtime.errors import InvalidInput, ServingError
from runtime.inference import InferRequest, InferResponse, InferTensor, RequestedOutput
from thawwire.grpc_messages import FINAL_RESPONSE, stream_error
from thawwire.grpc_service import pb


def _request() -> InferRequest:
    words = np.array([b"a", b"\x00bc"], dtype=np.object_)
    return InferRequest(
        model_name="square",
        model_version="2",
        inputs=[
            InferTensor("IN", "INT32", (2, 2), np.arange(4, dtype=np.int32).reshape(2, 2)),
            InferTensor("WORDS", "BYTES", (2,), words),
        ],
        requested_outputs=[RequestedOutput("OUT")],
        id="r1",
        parameters={"sequence_id": 7, "label": "x"},
    )


def test_a_request_survives_the_trip_through_the_servers_decoder() -> None:
    message = model_infer_request(_request())
    decoded = decode_model_infer(pb.ModelInferRequest.FromString(message.SerializeToString()))
    assert (decoded.model_name, decoded.model_version, decoded.id) == ("square", "2", "r1")
    assert decoded.parameters == {"sequence_id": 7, "label": "x"}
    assert [t.name for t in decoded.inputs] == ["IN", "WORDS"]
    assert np.array_equal(decoded.inputs[0].data, np.arange(4).reshape(2, 2))
    assert list(decoded.inputs[1].data) == [b"a", b"\x00bc"]
    assert [o.name for o in decoded.requested_outputs] == ["OUT"]


def test_a_stream_request_asks_for_the_empty_final_response() -> None:
    message = pb.ModelInferRequest.FromString(stream_request(_request()))
    assert message.parameters["triton_enable_empty_final_response"].bool_param is True
    assert decode_model_infer(message).parameters["triton_enable_empty_final_response"] is True


def _answer(response: InferResponse, final: bool) -> bytes:
    answer = pb.ModelStreamInferResponse()
    encode_model_infer(response, _request(), final=final, into=answer.infer_response)
    return bytes(answer.SerializeToString())


def test_responses_come_back_with_their_final_flag() -> None:
    out = InferTensor("OUT", "FP32", (3,), np.array([1.5, -2.0, 0.0], dtype=np.float32))
    sent = InferResponse("square", "2", [out], id="r1", parameters={"step": 3})
    got = stream_response(_answer(sent, final=False), "square")
    assert (got.model_name, got.model_version, got.id, got.final, got.flag_only) == (
        "square", "2", "r1", False, False,
    )  # fmt: skip
    assert got.parameters == {"step": 3}
    assert got.outputs[0].shape == (3,) and np.array_equal(got.outputs[0].data, out.data)
    end = pb.ModelStreamInferResponse()
    end.infer_response.model_name = "square"
    end.infer_response.parameters[FINAL_RESPONSE].bool_param = True
    last = stream_response(end.SerializeToString(), "square")
    assert last.final and last.flag_only and last.outputs == []


def test_a_response_whose_outputs_and_bytes_disagree_is_refused() -> None:
    message = pb.ModelInferResponse(model_name="m")
    message.outputs.add(name="OUT", datatype="INT32", shape=[2])
    message.raw_output_contents.append(b"\x00" * 4)  # 2 int32 need 8 bytes
    with pytest.raises(InvalidInput):
        model_infer_response(message)
    message.raw_output_contents.append(b"")
    with pytest.raises(InvalidInput, match="2 entries but the response has 1 outputs"):
        model_infer_response(message)


def test_an_in_stream_error_is_a_serving_error() -> None:
    error = stream_error("boom at step 2", request_id="r1", model_name="m", model_version="")
    with pytest.raises(ServingError, match="boom at step 2"):
        stream_response(error.SerializeToString(), "m")
