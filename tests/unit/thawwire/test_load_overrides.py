"""A repository load's overrides as both servers read them (thawwire.load_overrides): REST's
base64 strings and gRPC's typed parameters give one override, refused in one set of words."""

from __future__ import annotations

import base64
import json

import pytest

from thawwire.errors import LoadOverrideError
from thawwire.grpc_service import pb
from thawwire.load_overrides import (
    LoadOverride,
    overrides_from_grpc,
    overrides_from_json,
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


def test_grpc_refuses_parameters_of_the_wrong_type() -> None:
    with pytest.raises(LoadOverrideError, match="expected string_param"):
        overrides_from_grpc(_grpc({"config": b"{}"}))
    with pytest.raises(LoadOverrideError, match="expected bytes_param"):
        overrides_from_grpc(_grpc({"config": "{}", "file:1/m": "text"}))
