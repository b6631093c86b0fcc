"""What a replica's HTTP error answer says beyond its status, for the replica that reads it back.

Under `thaw up` an ensemble's step and a BLS call run on another replica, over HTTP through the
front door (runtime.direct.front_door). An HTTP status alone loses two things Triton keeps in
one process, so a replica's error answer carries them as headers (lower case, as
thawwire.model_control.NOT_LOADED):

- FROM_MODEL (`1`): the error is a model's own answer (a Python model's TritonError, an
  ensemble's failed step), not the server refusing the request. A refusal and a model's error
  read differently to a BLS caller (Triton's "Model m - Error when running inference: " goes
  before a refusal only) and end a gRPC stream differently (runtime.errors.is_refusal).
- GRPC_CODE (a gRPC status name): the model's TritonError code where HTTP has no status of its
  own for it (UNKNOWN, ALREADY_EXISTS, CANCELLED all answer 400), so an ensemble whose step
  answered CANCELLED answers CANCELLED over gRPC on every replica, as Triton does.

A value that is not one of these is ignored (the answer reads as its status alone).

    headers[GRPC_CODE] = "CANCELLED"
    grpc_code_of(headers.get(GRPC_CODE))  # "CANCELLED"; "" for None or "NOPE"
"""

from __future__ import annotations

__all__ = ["FROM_MODEL", "GRPC_CODE", "GRPC_CODES", "grpc_code_of"]

FROM_MODEL = "thaw-error-from-model"
GRPC_CODE = "thaw-error-grpc-code"

# The gRPC status names an error may carry (grpc.StatusCode's, OK aside).
GRPC_CODES = frozenset(
    {
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    }
)


def grpc_code_of(value: str | None) -> str:
    """The gRPC status name a GRPC_CODE header carries; "" when absent or not a name."""
    return value if value in GRPC_CODES else ""
