"""The runtime's inference value types, shared by the HTTP codec, the scheduler and backends.

Tensors are numpy arrays in the dtype `runtime.datatypes.v2_to_numpy(datatype)` gives (BYTES:
object arrays of `bytes`; BF16: uint16 carriers). The HTTP layer decodes JSON/binary bodies into
`InferRequest` and encodes `InferResponse`; backends never see HTTP.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

__all__ = [
    "REQUEST_FIELDS",
    "InferRequest",
    "InferResponse",
    "InferTensor",
    "RequestTrace",
    "RequestedOutput",
    "ResponseSink",
]

# The request `parameters` Triton's front ends read as fields of the request itself (sequence
# id and flags, priority, timeout in µs; runtime.scheduling.request_parameters checks them):
# never refused for their type as other parameters are, never shown to a Python model's
# `parameters()` (Triton 2.51, both protocols).
REQUEST_FIELDS = frozenset({"sequence_id", "sequence_start", "sequence_end", "priority", "timeout"})


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
    """An output the client asked for; `binary` follows `binary_data` / `binary_data_output`.
    `labels`: the output's classification labels, and `batched` whether its first dimension
    is the batch's (classes are ranked per batch entry, else over the whole tensor), both set
    by the model that accepts the request."""

    name: str
    binary: bool = False
    class_count: int = 0
    parameters: dict[str, Any] = field(default_factory=dict)
    labels: tuple[str, ...] = ()
    batched: bool = True


class ResponseSink(Protocol):
    """Where a decoupled model's responses to one request go (runtime.scheduling.response_stream).

    `send` may be called from any thread: a response, an error (an Exception, normally a
    ServingError), or None for Triton's flag-only final; `final` ends the request.
    `cancelled` says whether the client went away (`InferenceResponseSender.is_cancelled`).
    """

    def send(self, item: InferResponse | Exception | None, *, final: bool) -> None: ...

    def cancelled(self) -> bool: ...


class RequestTrace(Protocol):
    """A request's trace (runtime.observe.tracing.Trace): the frontend that received the
    request made it (sampled or not); an ensemble's step and a BLS call get a child of their
    parent's. `sampled` False: nothing is recorded."""

    sampled: bool
    id: int  # unique among the server's traces (0: not sampled)

    def add(self, activity: str, ns: int) -> None: ...
    def executed(self, version: str, activities: tuple[tuple[str, int], ...]) -> None: ...
    def tensors(self, activity: str, tensors: list[InferTensor]) -> None: ...
    def child(self, model: str, request_id: str) -> RequestTrace: ...
    def end(self) -> None: ...


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
    # Set for a request to a decoupled model (ModelManager.stream): its responses go here.
    response_sink: ResponseSink | None = None
    # The future its scheduler resolves with its response (set at enqueue; None when run
    # inline). Cancelled when the client went away (a Python model's `is_cancelled()`); a
    # backend on the event loop may resolve it before its execute returns (a Python model's
    # response sender answering at once, as Triton sends it).
    completion: asyncio.Future[InferResponse] | None = None
    # Its trace (Triton's `triton` trace mode): None when no frontend decided (tracing off,
    # or a request from inside the server: sampled when it executes, as before).
    trace: RequestTrace | None = None


@dataclass(slots=True)
class InferResponse:
    """The outputs of one request, in the order the model declares them.

    From a decoupled model (ModelManager.stream) a request may have many: `final` marks the
    last, and `flag_only` one that only carries Triton's final flag (no outputs; gRPC sends it
    only when the client asked for `triton_enable_empty_final_response`). `rescheduled` marks
    no response at all: the model released its request with Triton's RESCHEDULE flag (an
    iterative sequence, runtime.scheduling.sequence_scheduler), which runs it again.
    `error` marks a decoupled model's error response sent without the final flag: it has no
    outputs, and the request goes on (Triton sends it in the stream and keeps streaming); an
    error with the final flag is raised instead (ModelManager.stream).
    """

    model_name: str
    model_version: str
    outputs: list[InferTensor]
    id: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    final: bool = True
    flag_only: bool = False
    rescheduled: bool = False
    error: Exception | None = None

    def checked(self) -> InferResponse:
        """This response, or its `error` raised: for a reader that ends the request at its
        first error (an ensemble step, a default model's one answer, the OpenAI endpoints)."""
        if self.error is not None:
            raise self.error
        return self
