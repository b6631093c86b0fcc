"""The gRPC status code of each v2 error, as Triton maps its errors: one table for both sides.

Thaw's errors carry the HTTP status of the v2 REST protocol (400, 404, 503, ...); over gRPC the
same error leaves with the code Triton's gRPC frontend gives the matching Triton error
(`GrpcStatusUtil::CodeToStatus`): INVALID_ARG -> INVALID_ARGUMENT, NOT_FOUND -> NOT_FOUND,
UNAVAILABLE -> UNAVAILABLE, UNSUPPORTED -> UNIMPLEMENTED, INTERNAL -> INTERNAL. The statuses
Triton has no error code for map as gRPC's own conventions say: a request over a size cap is
RESOURCE_EXHAUSTED (what grpc itself answers for a message over its receive limit), a deadline
is DEADLINE_EXCEEDED, a replica that reset is UNAVAILABLE (retryable).
"""

from __future__ import annotations

import grpc

__all__ = ["error_status", "grpc_status", "http_status"]

_BY_HTTP: dict[int, grpc.StatusCode] = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    404: grpc.StatusCode.NOT_FOUND,
    405: grpc.StatusCode.UNIMPLEMENTED,
    408: grpc.StatusCode.DEADLINE_EXCEEDED,  # the request did not arrive in time
    409: grpc.StatusCode.ALREADY_EXISTS,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    500: grpc.StatusCode.INTERNAL,
    501: grpc.StatusCode.UNIMPLEMENTED,
    502: grpc.StatusCode.UNAVAILABLE,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}

_BY_CODE: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 413,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.CANCELLED: 499,  # the client went away (nginx's convention)
}


def grpc_status(http: int) -> grpc.StatusCode:
    """The gRPC code of an error with HTTP status `http` (an unknown 4xx: INVALID_ARGUMENT,
    anything else: INTERNAL)."""
    code = _BY_HTTP.get(http)
    if code is not None:
        return code
    return grpc.StatusCode.INVALID_ARGUMENT if 400 <= http < 500 else grpc.StatusCode.INTERNAL


def error_status(status: int, grpc_code: str = "") -> grpc.StatusCode:
    """The gRPC code of an error: its own `grpc_code` (a status name: a model's UNKNOWN,
    ALREADY_EXISTS or CANCELLED, which REST answers 400 as Triton does) or that of `status`."""
    if grpc_code:
        return grpc.StatusCode[grpc_code]
    return grpc_status(status)


def http_status(code: grpc.StatusCode) -> int:
    """The HTTP status a gRPC outcome counts as in HTTP-labelled metrics (500 when unknown)."""
    return _BY_CODE.get(code, 500)
