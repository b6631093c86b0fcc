"""The datatype table and Triton's BYTES wire format, checked against tritonclient's own codec."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor

from runtime.datatypes import (
    V2_DATATYPES,
    config_to_v2,
    deserialize_bytes,
    element_size,
    numpy_to_v2,
    serialize_bytes,
    v2_to_config,
    v2_to_numpy,
)
from runtime.errors import InvalidInput


def test_every_v2_datatype_round_trips_through_the_config_enum() -> None:
    from tritonclient.grpc import model_config_pb2 as mc

    for name in V2_DATATYPES:
        config_name = v2_to_config(name)
        mc.DataType.Value(config_name)  # raises ValueError for a name the enum lacks
        assert config_to_v2(config_name) == name


@pytest.mark.parametrize(
    ("datatype", "size"), [("BOOL", 1), ("INT64", 8), ("FP16", 2), ("BF16", 2), ("BYTES", 0)]
)
def test_element_sizes(datatype: str, size: int) -> None:
    assert element_size(datatype) == size


def test_numpy_names_match_tritonclient() -> None:
    from tritonclient.utils import np_to_triton_dtype

    for dtype in (np.float16, np.float32, np.int8, np.uint64, np.bool_, np.object_):
        assert numpy_to_v2(np.dtype(dtype)) == np_to_triton_dtype(np.dtype(dtype))


def test_unknown_datatype_is_a_400() -> None:
    with pytest.raises(InvalidInput, match="unknown datatype 'FP8'"):
        v2_to_numpy("FP8")


def test_bytes_wire_format_matches_tritonclient() -> None:
    array = np.array([[b"a", b""], [b"\x00\xff", "naïve".encode()]], dtype=np.object_)
    ours = serialize_bytes(array)
    theirs = serialize_byte_tensor(array)
    assert theirs is not None
    assert ours == theirs.item()
    back = deserialize_bytes(ours, (2, 2))
    assert back.shape == (2, 2)
    assert list(back.reshape(-1)) == list(deserialize_bytes_tensor(ours))


@pytest.mark.parametrize(
    "wire",
    [b"\x05\x00\x00\x00ab", b"\x01\x00", b"\x01\x00\x00\x00a\x01\x00\x00\x00b\x01\x00\x00\x00c"],
)
def test_bytes_that_lie_about_lengths_are_refused(wire: bytes) -> None:
    with pytest.raises(InvalidInput):
        deserialize_bytes(wire, (2,))


@pytest.mark.parametrize(
    ("wire", "shape", "error"),
    [  # Triton 2.51's core (ValidateBytesInputs), observed over gRPC side by side
        (b"\x05\x00\x00\x00ab", (1,),
         "incomplete string data for inference input 'IN', expecting string of length 5 but "
         "only 2 bytes available"),
        # a cut element short of the shape's count: the count is named first
        (b"\x05\x00\x00\x00ab", (2,),
         "expected 2 string elements for inference input 'IN' for model 'strings', got 1"),
        (b"\x01\x00\x00\x00a\x04\x00\x00\x00b", (2,), "expecting string of length 4"),
    ],
)  # fmt: skip
def test_a_cut_bytes_element_is_named_as_triton_names_it(
    wire: bytes, shape: tuple[int, ...], error: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        deserialize_bytes(wire, shape, name="IN", model="strings")
    assert error in str(refused.value)
