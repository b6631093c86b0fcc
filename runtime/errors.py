"""The runtime's error tree; every error that reaches HTTP carries its status code.

    ServingError (500)                 backend failure, anything unexpected
    ├── InvalidInput (400)             malformed body, shape/datatype mismatch, bad parameter
    │   └── JsonTooDeep                JSON nested deeper than the cap; names the member
    ├── Restricted (403)               an API `--http-restricted-api` restricts, without its header
    ├── ModelNotFound (404)            unknown model or version; model names that are not names
    ├── RouteNotFound (404)            no such route
    ├── MethodNotAllowed (405)
    ├── BodyTimeout (408)              the request body did not arrive within `--body-timeout-s`
    ├── PayloadTooLarge (413)          body over the configured cap (also after decompression)
    ├── ModelUnavailable (503)         known but not ready / not loaded / queue full
    ├── DeviceOutOfMemory (503)        the GPU has no room for this load or this request
    ├── DeadlineExceeded (504)         request timed out inside the server
    ├── ControlDisabled (503)          load/unload outside explicit model control (Triton's
    │                                  UNAVAILABLE, its code on both protocols)
    ├── FeatureDisabled (501)          a feature this server does not offer (e.g. a repository
    │   │                              name in a repository call)
    │   └── UnsupportedEncoding        a body's Content-Encoding is not gzip/deflate (Triton's)
    ├── RepositoryError (400)          config.pbtxt or model files are wrong; names file and field
    │   └── RepositoryConflict (409)   a repository or model mapping registered already (Triton's
    │                                  ALREADY_EXISTS)
    └── ModelCodedError (400)          a model's own error with a Triton code REST has no status
        ├── ModelErrorUnknown          for (Triton's HttpCodeFromError: 400); over gRPC the
        ├── ModelErrorAlreadyExists    code's own status, `grpc_code` (UNKNOWN, ALREADY_EXISTS,
        └── ModelErrorCancelled        CANCELLED), as Triton's GrpcStatusUtil::CodeToStatus

One aiohttp middleware turns any of these into `{"error": message}` with `status`.

`from_model` marks an error a model itself answered (a Python model's TritonError): a 400 or 404
of a model is no refusal of the request by the server (a gRPC stream with Triton's
`triton_grpc_error` header ends on the first, not on a refusal: runtime.grpc.stream).
"""

from __future__ import annotations

from thawserver.body_deadline import BODY_TIMEOUT_STATUS

__all__ = [
    "BodyTimeout",
    "ControlDisabled",
    "DeadlineExceeded",
    "DeviceOutOfMemory",
    "FeatureDisabled",
    "InvalidInput",
    "JsonTooDeep",
    "MethodNotAllowed",
    "ModelCodedError",
    "ModelErrorAlreadyExists",
    "ModelErrorCancelled",
    "ModelErrorUnknown",
    "ModelNotFound",
    "ModelUnavailable",
    "PayloadTooLarge",
    "RepositoryConflict",
    "RepositoryError",
    "Restricted",
    "RouteNotFound",
    "ServerStopping",
    "ServingError",
    "UnsupportedEncoding",
    "as_serving_error",
    "is_refusal",
]


class ServingError(Exception):
    """Base of every runtime error; `status` is the HTTP status it maps to."""

    status: int = 500
    grpc_code: str = ""  # a gRPC status name; empty: the one of `status` (thawserver.grpc_status)

    def __init__(self, message: str, *, from_model: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.from_model = from_model


class InvalidInput(ServingError):
    status = 400


class JsonTooDeep(InvalidInput):
    """A JSON text nested deeper than `max_depth`, in Triton's words (its limit is 100).

    `member` is the top-level object member whose value nests too deep, when the text is an
    object and that member could be named; a handler that expects a scalar there says so.
    """

    def __init__(self, max_depth: int, member: str | None) -> None:
        super().__init__(f"JSON nesting depth exceeds maximum allowed limit ({max_depth})")
        self.member = member


class Restricted(ServingError):
    status = 403


class ModelNotFound(ServingError):
    status = 404


class RouteNotFound(ServingError):
    status = 404


class MethodNotAllowed(ServingError):
    status = 405


class BodyTimeout(ServingError):
    """A slow or stalled client: its body not fully received in time (thawserver.body_deadline,
    the status `thaw up` answers too)."""

    status = BODY_TIMEOUT_STATUS


class PayloadTooLarge(ServingError):
    status = 413


class ModelUnavailable(ServingError):
    status = 503


class ServerStopping(ServingError):
    """The server is shutting down and begins nothing new."""

    status = 503


class ModelNotLoaded(ModelUnavailable):
    """The model is not loaded in this server (never loaded, unloaded, being unloaded, or
    its load failed): the request never reached it. Its answer carries the model's name
    (thawwire.model_control.NOT_LOADED)."""

    def __init__(self, model: str, message: str, status: int = 503) -> None:
        super().__init__(message)
        self.model = model
        self.status = status  # 404 (Triton's NOT_FOUND) for a model unloaded on request


class DeviceOutOfMemory(ServingError):
    """CUDA out of memory (or too little free VRAM for a restore): fails that load or that
    request only; the server and its other models go on. 503: another replica may have room."""

    status = 503


class DeadlineExceeded(ServingError):
    status = 504


class FeatureDisabled(ServingError):
    status = 501


class UnsupportedEncoding(FeatureDisabled):
    """A request body in a `Content-Encoding` other than gzip, deflate or identity: Triton's
    501 "Unsupported compression type", its answer naming in `Accept-Encoding` the codings
    it takes (`accept_encoding`)."""

    accept_encoding = "gzip, deflate"

    def __init__(self) -> None:
        super().__init__("Unsupported compression type")


class ControlDisabled(ServingError):
    """Triton answers load/unload outside explicit mode UNAVAILABLE: 503 on REST, UNAVAILABLE
    on gRPC (its python_grpc_aio_test pins the code)."""

    status = 503


class RepositoryError(ServingError):
    status = 400


class RepositoryConflict(RepositoryError):
    status = 409
    grpc_code = "ALREADY_EXISTS"


class ModelCodedError(ServingError):
    status = 400


class ModelErrorUnknown(ModelCodedError):
    grpc_code = "UNKNOWN"


class ModelErrorAlreadyExists(ModelCodedError):
    grpc_code = "ALREADY_EXISTS"


class ModelErrorCancelled(ModelCodedError):
    grpc_code = "CANCELLED"


def is_refusal(exc: ServingError) -> bool:
    """Whether `exc` refused a request before any model ran it (bad input, an unknown or
    unready model, a stopping server); a model's own error never is. Triton answers a refusal
    in a stream's place, before the stream (a plain error for generate_stream; in-stream even
    with `triton_grpc_error`), and a model's error inside it (observed on 2.51)."""
    refusal = isinstance(exc, InvalidInput | ModelNotFound | ModelUnavailable | ServerStopping)
    return refusal and not exc.from_model


def as_serving_error(exc: Exception) -> ServingError:
    """`exc` as a ServingError: itself when it is one (a model's error response always is),
    else an internal error with its text."""
    return exc if isinstance(exc, ServingError) else ServingError(str(exc))
