"""The runtime's inference value types, shared by the HTTP codec, the scheduler and backends.

Tensors are numpy arrays in the dtype `runtime.datatypes.v2_to_numpy(datatype)` gives (BYTES:
object arrays of `bytes`; BF16: uint16 carriers). The HTTP layer decodes JSON/binary bodies into
`InferRequest` and encodes `InferResponse`; backends never see HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["InferRequest", "InferResponse", "InferTensor", "RequestedOutput"]


@dataclass(slots=True)
class InferTensor:
    """One named tensor; `shape` is authoritative (a BYTES array may be 1-D until reshaped)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: np.ndarray
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class RequestedOutput:
    """An output the client asked for; `binary` follows `binary_data` / `binary_data_output`."""

    name: str
    binary: bool = False
    class_count: int = 0
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class InferRequest:
    """A decoded infer request; `requested_outputs` empty means every output of the model.

    `raw_input` holds the body of a raw binary request (Triton's `Inference-Header-Content-
    Length: 0`): `inputs` is empty until ModelSignature.validate deduces the model's one input
    from it.
    """

    model_name: str
    model_version: str
    inputs: list[InferTensor]
    requested_outputs: list[RequestedOutput] = field(default_factory=list)
    id: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    binary_output_default: bool = False
    raw_input: bytes | None = None


@dataclass(slots=True)
class InferResponse:
    """The outputs of one request, in the order the model declares them.

    `final` is False on a response after which more responses of the same request follow (a
    decoupled model's stream, `ModelManager.stream`); a non-decoupled model's one response is
    final. gRPC streams send it as Triton's `triton_final_response` parameter.
    """

    model_name: str
    model_version: str
    outputs: list[InferTensor]
    id: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    final: bool = True
