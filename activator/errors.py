"""The activator's error tree; every error that reaches HTTP carries its status code.

    ActivatorError (500)                  anything unexpected
    ├── BadRequest (400)                  a body the activator itself reads is not valid
    ├── ConfigError (400)                 a `thaw.*` setting or flag out of range (start-up)
    ├── AmbiguousModel (400)              a name several namespaces hold
    │                                     (`--model-namespacing=true`; Triton's words)
    ├── UnknownModel (404)                no such model in the repository (or not a name)
    ├── RouteNotFound (404)
    ├── Restricted (403)                  an API `--http-restricted-api` restricts, without
    │                                     its header (Triton's words)
    ├── BodyTimeout (408)                 the request body did not arrive in time (slow client)
    ├── NotSupported (501)                a feature `thaw up` does not offer (load overrides)
    ├── ControlDisabled (503)             load/unload without `--model-control-mode explicit`
    │                                     (Triton's UNAVAILABLE)
    ├── PayloadTooLarge (413)             body size (declared or chunked) over the limit
    ├── ModelUnavailable (503)            the model's config.pbtxt could not be used (reason)
    ├── Overloaded (503)                  held-request buffer full (count or bytes); Retry-After
    ├── ActivationFailed (503)            the model could not be brought up (load error, crash)
    │   └── RuntimeRefused (503)          a runtime answered its load or unload call with an
    │                                     error (it read the model and refused it)
    ├── StartWithdrawn (503)              a replica start the backend gave up without failing
    │                                     (a follower's start nobody needs); never reaches a
    │                                     client: the endpoint decides again
    ├── ScalerUnavailable (503)           the scaler backend cannot run (API unreachable or
    │                                     forbidden, no warm pool): `thaw up` stops at start
    ├── HeldTimeout (504)                 held past its deadline without a ready replica
    ├── UpstreamTimeout (504)             the replica did not answer within the request timeout
    └── UpstreamFailed (502)              the replica reset or died mid-request

One aiohttp middleware (app.py) turns any of these into `{"error": message}` with `status`.
"""

from __future__ import annotations

__all__ = [
    "ActivationFailed",
    "ActivatorError",
    "AmbiguousModel",
    "BadRequest",
    "BodyTimeout",
    "ConfigError",
    "ControlDisabled",
    "HeldTimeout",
    "ModelUnavailable",
    "NotSupported",
    "Overloaded",
    "PayloadTooLarge",
    "Restricted",
    "RouteNotFound",
    "RuntimeRefused",
    "ScalerUnavailable",
    "StartWithdrawn",
    "UnknownModel",
    "UpstreamFailed",
    "UpstreamTimeout",
]


class ActivatorError(Exception):
    """Base of every activator error; `status` is the HTTP status it maps to."""

    status: int = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def headers(self) -> dict[str, str]:
        """Extra response headers for this error (e.g. Retry-After)."""
        return {}


class BadRequest(ActivatorError):
    status = 400


class ConfigError(ActivatorError):
    status = 400


class AmbiguousModel(ActivatorError):
    status = 400


class UnknownModel(ActivatorError):
    status = 404


class RouteNotFound(ActivatorError):
    status = 404


class Restricted(ActivatorError):
    status = 403


class BodyTimeout(ActivatorError):
    status = 408


class NotSupported(ActivatorError):
    status = 501


class ControlDisabled(ActivatorError):
    status = 503


class PayloadTooLarge(ActivatorError):
    status = 413


class ModelUnavailable(ActivatorError):
    status = 503


class Overloaded(ActivatorError):
    status = 503

    def __init__(self, message: str, *, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class ActivationFailed(ActivatorError):
    """`refusal`: a replica's own answer to the model's load, when that is why (its model
    files refused, in tritonserver's words); a repository load call answers with it."""

    status = 503

    def __init__(self, message: str, *, refusal: str = "") -> None:
        super().__init__(message)
        self.refusal = refusal

    def headers(self) -> dict[str, str]:
        return {"Retry-After": "1"}


class RuntimeRefused(ActivationFailed):
    """A runtime answered a control call (load, unload) with its own error: it is up and
    said no, unlike a call that timed out or could not reach it. `reason`: its error text."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class ScalerUnavailable(ActivatorError):
    status = 503


class StartWithdrawn(ActivatorError):
    """`ScalerBackend.start_replica` ended without a replica and without a failure: nothing
    needs the start any more (no request waits for it, or this activator's role changed).
    Held requests are not failed by it; the endpoint decides again."""

    status = 503


class HeldTimeout(ActivatorError):
    status = 504


class UpstreamTimeout(ActivatorError):
    status = 504


class UpstreamFailed(ActivatorError):
    """`partial` is the client response already started (headers sent) when the replica died;
    its connection has been aborted so the client sees a failure, never a truncated success."""

    status = 502

    def __init__(self, message: str, *, partial: object | None = None) -> None:
        super().__init__(message)
        self.partial = partial
