"""Fuzz gRPC `ModelInfer`: message bytes → parse → decode → the model service → encode.

The target is the servicer's own `model_infer` (what `thaw serve`'s gRPC port runs per call)
over an in-memory model service (`identity` echoes its input, so every decoded tensor is also
encoded back). Property: it answers, or raises a `ServingError` or protobuf's `DecodeError`
(both leave as a gRPC status with a message: `grpc_handlers._answering`); never another
exception (which would leave as INTERNAL), never a hang.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError
from hypothesis import strategies as st

from runtime.config import ModelControlMode, ServeConfig
from runtime.datatypes import V2_DATATYPES
from runtime.errors import ServingError
from runtime.grpc.handlers import GrpcHandlers
from runtime.models.lifecycle import ServerState
from tests.fakes.model_service import FakeModelService
from tests.fuzz.targets import fuzz_target
from thawwire.grpc_service import pb

_INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
_DIMS = st.integers(0, 4) | _INT64
_CONTENT_FIELDS = {
    "bool_contents": st.booleans(),
    "int_contents": st.integers(-(1 << 31), (1 << 31) - 1),
    "int64_contents": _INT64,
    "uint_contents": st.integers(0, (1 << 32) - 1),
    "uint64_contents": st.integers(0, (1 << 64) - 1),
    "fp32_contents": st.floats(width=32, allow_nan=True),
    "fp64_contents": st.floats(allow_nan=True),
    "bytes_contents": st.binary(max_size=8),
}
_PARAM_KINDS = {
    "bool_param": st.booleans(),
    "int64_param": _INT64,
    "uint64_param": st.integers(0, (1 << 64) - 1),
    "double_param": st.floats(),
    "string_param": st.text(max_size=8),
}
_PARAM_KEYS = st.sampled_from(
    ["sequence_id", "sequence_start", "priority", "timeout", "classification", "binary_data",
     "triton_x", "shared_memory_region", "k"]
)  # fmt: skip


@st.composite
def _parameters(draw: st.DrawFn, target: Any) -> None:
    for key in draw(st.lists(_PARAM_KEYS, max_size=3, unique=True)):
        kind = draw(st.sampled_from(sorted(_PARAM_KINDS)) | st.none())
        if kind is None:
            target[key].SetInParent()  # a parameter with no value
        else:
            setattr(target[key], kind, draw(_PARAM_KINDS[kind]))


@st.composite
def _messages(draw: st.DrawFn) -> bytes:
    message = pb.ModelInferRequest(
        model_name=draw(st.sampled_from(["identity", "add_sub", "nope", "", "a/../b"])),
        model_version=draw(st.sampled_from(["", "1", "7", "x y"])),
        id=draw(st.text(max_size=6)),
    )
    draw(_parameters(message.parameters))
    raw = draw(st.booleans())
    for i in range(draw(st.integers(0, 3))):
        io = message.inputs.add(
            name=draw(st.sampled_from(["INPUT0", "INPUT1", "", f"in{i}"])),
            datatype=draw(st.sampled_from(sorted(V2_DATATYPES)) | st.just("FP8")),
            shape=draw(st.lists(_DIMS, max_size=4)),
        )
        draw(_parameters(io.parameters))
        if raw:
            message.raw_input_contents.append(draw(st.binary(max_size=64)))
        else:
            for name in draw(st.lists(st.sampled_from(sorted(_CONTENT_FIELDS)), max_size=2)):
                getattr(io.contents, name).extend(
                    draw(st.lists(_CONTENT_FIELDS[name], max_size=16))
                )
    if raw and draw(st.booleans()):
        message.raw_input_contents.append(b"extra")
    for name in draw(st.lists(st.sampled_from(["INPUT0", "INPUT1", "", "nope"]), max_size=2)):
        draw(_parameters(message.outputs.add(name=name).parameters))
    data = message.SerializeToString()
    if data and draw(st.integers(0, 4)) == 0:  # damaged on the wire
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] + draw(st.binary(max_size=4)) + data[at + 1 :]
    return data


_WIRE = _messages() | st.binary(max_size=200)


class _Context:
    """Only what `model_infer` touches of a grpc.aio context: nothing."""


def _handlers() -> GrpcHandlers:
    config = ServeConfig(repository=Path("."), model_control_mode=ModelControlMode.EXPLICIT)
    return GrpcHandlers(config, FakeModelService(), ServerState())  # type: ignore[arg-type]


@fuzz_target(_WIRE)
def _model_infer(data: bytes) -> None:
    try:
        answer = asyncio.run(_handlers().model_infer(data, _Context()))  # type: ignore[arg-type]
    except (ServingError, DecodeError):
        return
    pb.ModelInferResponse.FromString(answer)  # what left is a well-formed response


test_model_infer_messages, test_model_infer_messages_long = _model_infer
