"""The v2 JSON documents both sides already build, as `GRPCInferenceService` messages.

Metadata, configs, statistics and index rows are made once, as the REST protocol's JSON (the
runtime's ModelManager, the activator's repository and statistics ledger); over gRPC the same
documents leave as the matching protobuf messages, so the two protocols cannot drift apart.
Also Triton's typed request/response parameters (`InferParameter`) as plain Python values,
the form REST parameters take, and the in-stream error answer of `ModelStreamInfer`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from google.protobuf import json_format

from thawwire.grpc_service import pb

__all__ = [
    "FINAL_RESPONSE",
    "STREAM_STOPPING",
    "config_response",
    "index_response",
    "metadata_response",
    "parameter_kind",
    "parameter_value",
    "server_metadata_response",
    "set_parameter",
    "statistics_response",
    "stream_error",
]

FINAL_RESPONSE = "triton_final_response"
"""The response parameter that marks the last response of a request on a stream."""

STREAM_STOPPING = "the server is shutting down: this stream takes no new requests"
"""A stream's answer to a request sent once its server began to shut down (thaw serve and
thaw up alike): what is in flight is answered, nothing new is begun, as tritonserver's streams
end when it shuts down."""

ParameterValue = bool | int | float | str | bytes


def parameter_value(param: Any) -> ParameterValue | None:
    """An `InferParameter` (or `ModelRepositoryParameter`) as a Python value; None if unset."""
    which = param.WhichOneof("parameter_choice")
    return None if which is None else getattr(param, which)


def parameter_kind(param: Any) -> str | None:
    """Which field of the `parameter_choice` oneof is set (`int64_param`, ...), or None."""
    kind = param.WhichOneof("parameter_choice")
    return None if kind is None else str(kind)


def set_parameter(param: Any, value: Any) -> None:
    """Store a Python value in an `InferParameter` the way Triton types response parameters
    (bool, int64, double, string); anything else is written as its text."""
    if isinstance(value, bool):
        param.bool_param = value
    elif isinstance(value, int) and -(1 << 63) <= value < (1 << 63):
        param.int64_param = value
    elif isinstance(value, int):
        param.uint64_param = value
    elif isinstance(value, float):
        param.double_param = value
    elif isinstance(value, str):
        param.string_param = value
    else:
        param.string_param = str(value)


def _parsed(doc: Mapping[str, Any], message: Any) -> Any:
    # Unknown fields are dropped: a newer replica may add fields an older activator's
    # protos do not have, and its answer must still pass.
    return json_format.ParseDict(dict(doc), message, ignore_unknown_fields=True)


def server_metadata_response(doc: Mapping[str, Any]) -> pb.ServerMetadataResponse:
    """`GET /v2` as `ServerMetadataResponse` (name, version, extensions)."""
    return _parsed(doc, pb.ServerMetadataResponse())


def metadata_response(doc: Mapping[str, Any]) -> pb.ModelMetadataResponse:
    """Model metadata (thawwire.metadata) as `ModelMetadataResponse`."""
    return _parsed(doc, pb.ModelMetadataResponse())


def config_response(config_json: Mapping[str, Any]) -> pb.ModelConfigResponse:
    """Triton's `/config` JSON (proto field names, int64 as numbers) as `ModelConfigResponse`."""
    return _parsed({"config": config_json}, pb.ModelConfigResponse())


def statistics_response(rows: Iterable[Mapping[str, Any]]) -> pb.ModelStatisticsResponse:
    """`model_stats` rows (the statistics extension) as `ModelStatisticsResponse`."""
    return _parsed({"model_stats": list(rows)}, pb.ModelStatisticsResponse())


def index_response(rows: Iterable[Mapping[str, Any]]) -> pb.RepositoryIndexResponse:
    """Repository index rows ({name[, version, state, reason]}) as `RepositoryIndexResponse`."""
    return _parsed({"models": list(rows)}, pb.RepositoryIndexResponse())


def stream_error(
    message: str, *, request_id: str, model_name: str, model_version: str, final: bool = True
) -> pb.ModelStreamInferResponse:
    """A failed request's answer on a stream, as Triton writes it: `error_message` set, the
    response carrying only the request's id, model and the final-response flag (false for a
    decoupled model's error response sent without the final flag: more may follow); the
    stream goes on."""
    answer = pb.ModelStreamInferResponse(error_message=message)
    response = answer.infer_response
    response.id = request_id
    response.model_name = model_name
    response.model_version = model_version
    response.parameters[FINAL_RESPONSE].bool_param = final
    return answer
