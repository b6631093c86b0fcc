"""A repository load's overrides as both servers read them (thawwire.load_overrides): REST's
base64 strings and gRPC's typed parameters give one override, refused in one set of words."""

from __future__ import annotations

import base64
import json

import pytest

from thawwire.errors import LoadOverrideError, LoadParameterError
from thawwire.grpc_service import pb
from thawwire.load_overrides import (
    LoadOverride,
    check_config,
    overrides_from_grpc,
    overrides_from_json,
    unload_dependents_from_grpc,
)


def _grpc(params: dict[str, object]) -> dict[str, object]:
    """`ModelRepositoryParameter`s by key, typed by the Python value."""
    out: dict[str, object] = {}
    for key, value in params.items():
        param = pb.ModelRepositoryParameter()
        if isinstance(value, bytes):
            param.bytes_param = value
        elif isinstance(value, str):
            param.string_param = value
        else:
            param.int64_param = int(str(value))
        out[key] = param
    return out


def test_rest_and_grpc_give_the_same_override_and_it_travels_back_as_rest() -> None:
    config = json.dumps({"backend": "onnxruntime"})
    rest = overrides_from_json(
        {"config": config, "file:1/model.onnx": base64.b64encode(b"weights").decode()}
    )
    grpc = overrides_from_grpc(_grpc({"config": config, "file:1/model.onnx": b"weights"}))
    assert rest == LoadOverride(config, {"1/model.onnx": b"weights"})
    assert grpc == rest
    assert rest.parameters() == {
        "config": config,
        "file:1/model.onnx": base64.b64encode(b"weights").decode(),
    }
    assert overrides_from_json({}) is None and overrides_from_grpc({}) is None
    assert overrides_from_json({"config": {"backend": "python"}}) == LoadOverride(
        '{"backend": "python"}'
    )


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"config": 3}, "must be a JSON string"),
        ({"config": "{"}, "is not valid JSON"),
        ({"config": "[]"}, "must hold a JSON object"),
        ({"file:1/m": base64.b64encode(b"x").decode()}, "must also carry 'config'"),
        ({"config": "{}", "file:1/m": 7}, "must be base64 text"),
        ({"config": "{}", "file:1/m": "not base64!"}, "is not valid base64"),
        ({"config": "{}", "file:../m": "eA=="}, "without '..'"),
    ],
)
def test_rest_refusals(params: dict[str, object], words: str) -> None:
    with pytest.raises(LoadOverrideError, match=words.replace("(", r"\(")):
        overrides_from_json(params)


_NOT_A_STRING = "invalid value type for load parameter 'config', expected string_param."


@pytest.mark.parametrize(
    ("params", "words"),
    [  # Triton 2.51's gRPC frontend's words, observed side by side (no "failed to load" prefix)
        ({"config": b"{}"}, _NOT_A_STRING),
        ({"config": 5}, _NOT_A_STRING),
        ({"config": "{}", "file:1/m": "text"},
         "invalid value type for load parameter 'file:1/m', expected bytes_param."),
        ({"foo": 5}, "unrecognized load parameter 'foo'."),
        ({"foo": "x"}, "unrecognized load parameter 'foo'."),
        # every key's kind is checked before the config is read
        ({"config": "{not json", "foo": "x"}, "unrecognized load parameter 'foo'."),
    ],
)  # fmt: skip
def test_grpc_refuses_parameters_of_the_wrong_kind_or_name(
    params: dict[str, object], words: str
) -> None:
    with pytest.raises(LoadParameterError) as refused:
        overrides_from_grpc(_grpc(params))
    assert refused.value.message == words


def test_grpc_unload_dependents_must_be_a_bool_param() -> None:
    assert unload_dependents_from_grpc({}) is False
    flag = pb.ModelRepositoryParameter(bool_param=True)
    assert unload_dependents_from_grpc({"unload_dependents": flag, "other": flag}) is True
    for wrong in ("true", 1):
        with pytest.raises(LoadParameterError) as refused:
            unload_dependents_from_grpc(_grpc({"unload_dependents": wrong}))
        assert refused.value.message == (
            "invalid value type for 'unload_dependents' parameter, expected bool_param."
        )


def test_a_config_with_field_names_unquoted_loads_as_triton_reads_it() -> None:
    # qa/L0_iterative_sequence's own config: `direct:` without quotes, which Triton's parser
    # (protobuf's JSON parser) takes; text inside strings is left alone.
    config = '{"sequence_batching": {direct: {"max_queue_delay_microseconds": 1}}, "n": "a, b: c"}'
    assert json.loads(check_config(config) or "") == {
        "sequence_batching": {"direct": {"max_queue_delay_microseconds": 1}},
        "n": "a, b: c",
    }
