"""The stub protocol's messages: what each op carries, and pb_utils objects <-> wire tensors.

    server → stub                              stub → server
      init {model_file, decoupled, args}         ready | failed {error}
      execute {id, requests[]} + inputs          done {id, error?, responses[], reschedule?}
                                                   + outputs
                                                 send {key, final, response?}  (each sender send)
      bls_response {bls, final, response?}  ◀──  bls {bls, decoupled, timeout_us, request}
      reply {call, value? | error?}         ◀──  call {call, fn, args}   (metrics, model API,
                                                      is_cancelled [exec id, index])
                                                 log {level, message}
      finalize                                   finalized
A request is {id, params, outputs, correlation_id, flags, n}; a response {params, n} or
{error, code}, or in `done`: {none: true} (nothing returned, no sender taken), {sender: true}
(its sender answers it: a `send` before this `done` or after it) or {reschedule: true}; `n`
counts the tensors that follow in the message, request after request. `done`'s `reschedule`
lists the indices of the requests the model released with RESCHEDULE (any mode): they run
again. A `send` key is [exec id, request index].
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from runtime.python import pb_utils
from runtime.python.stub.wire import Tensor, v2_datatype

__all__ = [
    "SENDER_DROPPED",
    "pb_response",
    "pb_tensors",
    "response_fields",
    "split",
    "wants_reschedule",
    "wire_tensors",
]


def wants_reschedule(request: pb_utils.InferenceRequest) -> bool:
    """Whether the model released `request` with RESCHEDULE (`set_release_flags`), read once
    its `execute` returned, as Triton's python backend reads it."""
    return request._release_flags == pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE


# What a non-decoupled request answers when the model let go of its response sender unused.
SENDER_DROPPED = "the model let go of the request's response sender without sending a response"


def wire_tensors(tensors: list[Any]) -> list[Tensor]:
    """pb_utils Tensors as wire tensors (BYTES as object arrays)."""
    out = []
    for tensor in tensors:
        data = tensor.as_numpy()
        if type(data) is not np.ndarray:
            data = np.asarray(data)
        datatype = v2_datatype(data.dtype)
        out.append(Tensor(tensor.name(), datatype, data.shape, data))
    return out


def pb_tensors(tensors: list[Tensor]) -> list[Any]:
    return [pb_utils.Tensor(t.name, t.data) for t in tensors]


def response_fields(response: Any) -> tuple[dict[str, Any], list[Tensor]]:
    """A pb_utils.InferenceResponse as protocol fields and its output tensors."""
    if response.has_error():
        err = response.error()
        code = err.code() if hasattr(err, "code") else pb_utils.TritonError.INTERNAL
        message = err.message() if hasattr(err, "message") else str(err)
        return {"error": str(message), "code": int(code)}, []
    tensors = wire_tensors(response.output_tensors())
    params = response._parameters or {}  # a dict as the model gave it, or JSON text
    if not isinstance(params, dict):
        params = json.loads(response.parameters())
    return {"params": params, "n": len(tensors)}, tensors


def pb_response(fields: dict[str, Any] | None, tensors: list[Tensor]) -> Any:
    """Protocol fields (and their tensors) as a pb_utils.InferenceResponse."""
    if fields is None:
        return pb_utils.InferenceResponse()
    if "error" in fields:
        code = int(fields.get("code", pb_utils.TritonError.INTERNAL))
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(fields["error"], code))
    return pb_utils.InferenceResponse(pb_tensors(tensors), parameters=fields.get("params") or {})


def split(tensors: list[Tensor], counts: list[int]) -> list[list[Tensor]]:
    """A message's tensors, cut into consecutive groups of `counts`."""
    groups, at = [], 0
    for count in counts:
        groups.append(tensors[at : at + count])
        at += count
    return groups
