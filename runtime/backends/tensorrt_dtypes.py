"""TensorRT I/O tensor types as Thaw carries them: v2 datatype, numpy on the wire, torch on a GPU.

`trt.nptype` has no numpy type for BF16 or FP8 (numpy has neither) and raises TypeError, which
would fail the load of any plan with such I/O. The mapping is therefore keyed by the name of
`trt.DataType` (`DataType.BF16` → "BF16") and read without TensorRT: BF16 travels as Triton
sends it (v2 `BF16`, 16-bit words in a uint16 array) and lives on the GPU as `torch.bfloat16`.
FP8, INT4 and FP4 have no KServe v2 datatype (Triton's TensorRT backend refuses them as I/O too),
so a plan with such an input or output is refused at load, naming the tensor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["IoType", "from_wire", "io_type", "to_wire"]


@dataclass(frozen=True)
class IoType:
    """One I/O tensor's types: `v2` datatype, `numpy` dtype name of its wire array, `torch`
    dtype name of its device buffer (an attribute of the torch module)."""

    v2: str
    numpy: str
    torch: str


_BY_NAME = {
    "FLOAT": IoType("FP32", "float32", "float32"),
    "HALF": IoType("FP16", "float16", "float16"),
    "BF16": IoType("BF16", "uint16", "bfloat16"),
    "INT8": IoType("INT8", "int8", "int8"),
    "UINT8": IoType("UINT8", "uint8", "uint8"),
    "INT32": IoType("INT32", "int32", "int32"),
    "INT64": IoType("INT64", "int64", "int64"),
    "BOOL": IoType("BOOL", "bool", "bool"),
}


def io_type(trt_dtype: Any, tensor: str) -> IoType:
    """The types of a tensor of TensorRT type `trt_dtype` (a `trt.DataType` or its name);
    ValueError naming `tensor` for a type with no v2 datatype."""
    name = getattr(trt_dtype, "name", None) or str(trt_dtype).rpartition(".")[2]
    found = _BY_NAME.get(name)
    if found is None:
        raise ValueError(
            f"tensor '{tensor}' is TensorRT {name}, which has no KServe v2 datatype (as in "
            f"Triton); supported: {', '.join(sorted(_BY_NAME))}"
        )
    return found


def from_wire(torch: Any, data: Any, types: IoType) -> Any:
    """A request's array as the host torch tensor the engine's input takes (BF16: the uint16
    words reinterpreted, not converted)."""
    import numpy as np

    host = torch.from_numpy(np.ascontiguousarray(data, dtype=types.numpy))
    return host.view(torch.bfloat16) if types.v2 == "BF16" else host


def to_wire(torch: Any, value: Any, types: IoType) -> Any:
    """An output buffer (any device) as the numpy array of its v2 datatype."""
    value = value.detach().cpu()
    if value.dtype == torch.bfloat16:
        value = value.view(torch.int16)
    return value.numpy().view(types.numpy)
