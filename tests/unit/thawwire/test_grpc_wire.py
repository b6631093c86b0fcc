"""thawwire's gRPC knowledge: status codes of v2 errors, v2 documents as messages, the
announcement lines of a replica's other listeners."""

from __future__ import annotations

import grpc
import pytest

from thawserver.grpc_status import grpc_status, http_status
from thawwire.grpc_messages import (
    FINAL_RESPONSE,
    config_response,
    index_response,
    metadata_response,
    parameter_value,
    set_parameter,
    statistics_response,
    stream_error,
)
from thawwire.grpc_service import SERVICE, UNSUPPORTED, Method, method_path, pb
from thawwire.handoff_protocol import (
    Surface,
    listening_line,
    listening_url,
    surface_address,
    surface_line,
)


@pytest.mark.parametrize(
    ("http", "code"),
    [
        (400, grpc.StatusCode.INVALID_ARGUMENT),
        (404, grpc.StatusCode.NOT_FOUND),
        (413, grpc.StatusCode.RESOURCE_EXHAUSTED),
        (500, grpc.StatusCode.INTERNAL),
        (501, grpc.StatusCode.UNIMPLEMENTED),
        (502, grpc.StatusCode.UNAVAILABLE),
        (503, grpc.StatusCode.UNAVAILABLE),
        (504, grpc.StatusCode.DEADLINE_EXCEEDED),
        (418, grpc.StatusCode.INVALID_ARGUMENT),  # an unknown 4xx is the client's
        (599, grpc.StatusCode.INTERNAL),
    ],
)
def test_each_v2_error_has_the_grpc_code_triton_gives_it(http: int, code: grpc.StatusCode) -> None:
    assert grpc_status(http) is code


def test_grpc_outcomes_count_as_http_statuses_in_metrics() -> None:
    assert http_status(grpc.StatusCode.OK) == 200
    assert http_status(grpc.StatusCode.DEADLINE_EXCEEDED) == 504
    assert http_status(grpc.StatusCode.UNAVAILABLE) == 503
    assert http_status(grpc.StatusCode.DATA_LOSS) == 500


def test_every_method_of_the_proto_is_named_once() -> None:
    service = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert {m.name for m in service.methods} == {m.value for m in Method}
    assert service.full_name == SERVICE
    assert method_path(Method.MODEL_INFER) == "/inference.GRPCInferenceService/ModelInfer"
    assert Method.MODEL_INFER not in UNSUPPORTED and Method.LOG_SETTINGS not in UNSUPPORTED


def test_v2_documents_become_their_messages() -> None:
    meta = metadata_response(
        {
            "name": "m",
            "versions": ["1", "2"],
            "platform": "python",
            "inputs": [{"name": "I", "datatype": "FP32", "shape": [-1, 4]}],
            "outputs": [],
        }
    )
    assert (meta.name, list(meta.versions), list(meta.inputs[0].shape)) == (
        "m",
        ["1", "2"],
        [-1, 4],
    )
    config = config_response({"name": "m", "max_batch_size": 8, "input": [{"name": "I"}]})
    assert config.config.max_batch_size == 8 and config.config.input[0].name == "I"
    rows = [{"name": "m", "version": "1", "inference_count": 3, "future_field": 1,
             "inference_stats": {"success": {"count": 3, "ns": 9}}, "response_stats": {},
             "batch_stats": [{"batch_size": 1, "compute_infer": {"count": 3, "ns": 6}}],
             "memory_usage": []}]  # fmt: skip
    stats = statistics_response(rows).model_stats[0]
    assert stats.inference_count == 3 and stats.inference_stats.success.ns == 9
    assert stats.batch_stats[0].compute_infer.count == 3
    index = index_response([{"name": "a"}, {"name": "b", "version": "1", "state": "READY"}])
    assert [(m.name, m.state) for m in index.models] == [("a", ""), ("b", "READY")]


@pytest.mark.parametrize(
    ("value", "field"),
    [(True, "bool_param"), (7, "int64_param"), (1 << 63, "uint64_param"),
     (0.5, "double_param"), ("x", "string_param")],
)  # fmt: skip
def test_parameters_round_trip_in_their_typed_field(value: object, field: str) -> None:
    param = pb.InferParameter()
    set_parameter(param, value)
    assert param.WhichOneof("parameter_choice") == field
    assert parameter_value(param) == value
    assert parameter_value(pb.InferParameter()) is None


def test_a_stream_error_carries_the_request_and_the_final_flag() -> None:
    answer = stream_error("boom", request_id="r", model_name="m", model_version="2")
    assert answer.error_message == "boom"
    assert (answer.infer_response.id, answer.infer_response.model_version) == ("r", "2")
    assert answer.infer_response.parameters[FINAL_RESPONSE].bool_param is True
    assert not answer.infer_response.outputs


def test_other_listeners_are_announced_on_their_own_lines() -> None:
    grpc_line = surface_line(Surface.GRPC, "127.0.0.1:8001")
    assert grpc_line == "THAW_LISTENING_GRPC 127.0.0.1:8001"
    assert surface_address(grpc_line + "\n") == (Surface.GRPC, "127.0.0.1:8001")
    metrics = surface_line(Surface.METRICS, "http://127.0.0.1:8002")
    assert surface_address(metrics) == (Surface.METRICS, "http://127.0.0.1:8002")
    # Readers of the HTTP line never mistake the others for it, nor the other way round.
    assert listening_url(grpc_line) is None and listening_url(metrics) is None
    assert surface_address(listening_line("http://127.0.0.1:8000")) is None
    for other in ("THAW_LISTENING_GRPC", "THAW_LISTENING_FOO x", "THAW_LISTENING_ x", "x"):
        assert surface_address(other) is None
