"""activator.surfaces.grpc_envelope: the model, version and id of an inference message, read without
parsing tensors, are what protobuf itself reads, and so is the sequence its parameters name;
hostile bytes are an EnvelopeError."""

from __future__ import annotations

import random

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from google.protobuf.message import DecodeError
from tritonclient.grpc._utils import _get_inference_request

from activator.endpoint.sequence_routes import SequenceKey
from activator.surfaces.grpc_envelope import Envelope, EnvelopeError, envelope, sequence_of
from thawwire.grpc_service import pb


def _message(**fields: object) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(**fields)
    tensor = message.inputs.add(name="INPUT0", datatype="FP32", shape=[2])
    tensor.parameters["p"].int64_param = 3
    message.parameters["sequence_id"].int64_param = 42
    message.raw_input_contents.append(b"\x00" * 8)
    message.outputs.add(name="OUT")
    return message


def test_the_envelope_of_a_full_message() -> None:
    data = _message(model_name="add_sub", model_version="2", id="req-1").SerializeToString()
    assert envelope(data) == Envelope("add_sub", "2", "req-1")
    assert envelope(pb.ModelInferRequest().SerializeToString()) == Envelope("", "", "")


def test_fields_in_any_order_and_repeated_read_as_protobuf_reads_them() -> None:
    # Concatenated messages merge: the last model_name wins, wherever it is.
    data = (
        _message(model_name="first").SerializeToString()
        + pb.ModelInferRequest(id="x").SerializeToString()
        + pb.ModelInferRequest(model_name="late").SerializeToString()
    )
    parsed = pb.ModelInferRequest.FromString(data)
    assert envelope(data) == Envelope(parsed.model_name, parsed.model_version, parsed.id)
    assert envelope(data).model_name == "late"


def test_a_large_tensor_is_skipped_not_copied() -> None:
    message = _message(model_name="big")
    message.raw_input_contents.append(b"x" * (8 << 20))
    assert envelope(memoryview(message.SerializeToString())).model_name == "big"


@pytest.mark.parametrize(
    "data",
    [
        b"\x0a\x05abc",  # model_name's length runs past the end
        b"\x0a",  # ends inside the length
        b"\x08" + b"\xff" * 11,  # a varint of more than 10 bytes
        b"\x0b",  # a group (wire type 3)
        b"\x0f",  # wire type 7 does not exist
        b"\x00\x01",  # field number 0
        b"\x0a\x02\xff\xfe",  # model_name not UTF-8
        b"\x0a\x80\x40" + b"a" * 8192,  # a "name" of 8 KiB
    ],
)
def test_hostile_bytes_are_an_envelope_error(data: bytes) -> None:
    with pytest.raises(EnvelopeError):
        envelope(data)


def test_random_bytes_never_crash_and_agree_with_protobuf_when_it_parses() -> None:
    rng = random.Random(7)
    good = _message(model_name="m", model_version="1", id="i").SerializeToString()
    for _ in range(3000):
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            head = envelope(bytes(data))
        except EnvelopeError:
            continue
        try:
            parsed = pb.ModelInferRequest.FromString(bytes(data))
        except DecodeError:
            continue  # protobuf refuses more (nested messages, UTF-8 of other strings)
        assert head == Envelope(parsed.model_name, parsed.model_version, parsed.id)


def _client_message(**sequence: object) -> bytes:
    """The bytes tritonclient.grpc sends for a request with these sequence arguments."""
    tensor = grpcclient.InferInput("INPUT", [1], "FP32")
    tensor.set_data_from_numpy(np.zeros(1, np.float32))
    request = _get_inference_request(
        model_name="acc", inputs=[tensor], model_version="", request_id="r", outputs=None,
        sequence_id=sequence.get("sequence_id", 0),
        sequence_start=sequence.get("sequence_start", False),
        sequence_end=sequence.get("sequence_end", False),
        priority=0, timeout=None, parameters=None,
    )  # fmt: skip
    return bytes(request.SerializeToString())


@pytest.mark.parametrize(
    ("sequence", "key"),
    [
        ({"sequence_id": 7, "sequence_start": True}, SequenceKey(7, True, False)),
        ({"sequence_id": 7}, SequenceKey(7, False, False)),
        ({"sequence_id": 7, "sequence_end": True}, SequenceKey(7, False, True)),
        ({"sequence_id": "s-1", "sequence_start": True}, SequenceKey("s-1", True, False)),
        ({}, None),  # no sequence
    ],
)
def test_the_sequence_tritonclient_sends_is_read(sequence: dict[str, object], key: object) -> None:
    assert sequence_of(_client_message(**sequence)) == key


def test_no_usable_sequence_id_is_no_sequence() -> None:
    for value in ("bool_param", "double_param"):
        message = pb.ModelInferRequest(model_name="acc")
        setattr(message.parameters["sequence_id"], value, 1)
        assert sequence_of(message.SerializeToString()) is None  # the replica refuses it
    message = pb.ModelInferRequest(model_name="acc")
    message.parameters["sequence_id"].int64_param = 0
    assert sequence_of(message.SerializeToString()) is None
    # A flag that is no bool is no flag (the replica refuses it in Triton's words).
    message.parameters["sequence_id"].uint64_param = 9
    message.parameters["sequence_start"].int64_param = 1
    assert sequence_of(message.SerializeToString()) == SequenceKey(9, False, False)


def test_the_sequence_is_read_wherever_its_entries_are_and_tensors_are_not_parsed() -> None:
    message = _message(model_name="acc")  # sequence_id 42, before the tensors
    message.raw_input_contents.append(b"x" * (4 << 20))
    late = pb.ModelInferRequest()
    late.parameters["sequence_end"].bool_param = True  # after the tensors: merged, as protobuf
    data = message.SerializeToString() + late.SerializeToString()
    assert sequence_of(memoryview(data)) == SequenceKey(42, False, True)


def test_hostile_parameters_are_an_envelope_error() -> None:
    with pytest.raises(EnvelopeError):
        sequence_of(b"\x22\x03\x0a\x05a")  # a parameters entry whose key runs past it
    with pytest.raises(EnvelopeError):
        sequence_of(b"\x22\x05abc")


def test_random_bytes_in_parameters_never_crash_and_agree_with_protobuf() -> None:
    rng = random.Random(11)
    good = _client_message(sequence_id=77, sequence_start=True)
    compared = 0
    for _ in range(3000):
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            key = sequence_of(bytes(data))
        except EnvelopeError:
            continue
        try:
            params = pb.ModelInferRequest.FromString(bytes(data)).parameters
        except DecodeError:
            continue  # protobuf refuses more (nested messages, UTF-8 of other strings)
        if key is not None:  # what the replica reads is what the activator routed on
            sequence_id = params["sequence_id"]
            assert getattr(sequence_id, str(sequence_id.WhichOneof("parameter_choice"))) == key.id
            start = params.get("sequence_start")
            is_bool = start is not None and start.WhichOneof("parameter_choice") == "bool_param"
            assert key.start == (is_bool and start is not None and start.bool_param)
            compared += 1
    assert compared > 100  # the mutations left many messages whole enough to compare
