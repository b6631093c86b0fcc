"""TensorRT I/O types without `trt.nptype`: BF16 carried as Triton carries it, FP8 refused."""

from __future__ import annotations

import enum

import numpy as np
import pytest
import torch

from runtime.backends.tensorrt_dtypes import from_wire, io_type, to_wire


class DataType(enum.Enum):
    """Stands in for `tensorrt.DataType` (its members print as `DataType.BF16`)."""

    FLOAT = 0
    BF16 = 7
    FP8 = 6
    BOOL = 4


def test_every_v2_type_tensorrt_has_maps_by_name() -> None:
    assert io_type(DataType.FLOAT, "x").v2 == "FP32"
    assert io_type("DataType.HALF", "x").torch == "float16"
    bf16 = io_type(DataType.BF16, "x")
    assert (bf16.v2, bf16.numpy, bf16.torch) == ("BF16", "uint16", "bfloat16")
    assert io_type(DataType.BOOL, "mask").numpy == "bool"


def test_fp8_io_is_refused_naming_the_tensor_as_triton_refuses_it() -> None:
    with pytest.raises(ValueError, match="tensor 'logits' is TensorRT FP8, which has no KServe"):
        io_type(DataType.FP8, "logits")


def test_bf16_words_travel_unchanged_to_the_engine_and_back() -> None:
    values = torch.tensor([1.5, -2.0, 3.140625], dtype=torch.bfloat16)
    words = values.view(torch.int16).numpy().view(np.uint16)  # what a Triton client sends
    types = io_type(DataType.BF16, "x")
    host = from_wire(torch, words, types)
    assert host.dtype == torch.bfloat16 and torch.equal(host, values)
    back = to_wire(torch, host * 2, types)
    assert back.dtype == np.uint16
    assert torch.equal(torch.from_numpy(back.view(np.int16)).view(torch.bfloat16), values * 2)
    floats = io_type(DataType.FLOAT, "y")
    assert to_wire(torch, from_wire(torch, [1, 2], floats), floats).tolist() == [1.0, 2.0]
