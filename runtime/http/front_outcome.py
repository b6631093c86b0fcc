"""What the native front asks this server to answer (decision 0032, phase 2): the outcome of an
infer the front sent to a hot model's stub itself, when it is not a success.

    thaw-front ─POST /thaw-front/outcome {model, version, instance, kind, ...}─▶ outcome_error
               ◀─ the error answer, rendered (and counted) as every other of this server's

The gRPC port's hot `ModelInfer` calls (phase 3) post the same document with `"surface":
"grpc"`: the answer is then JSON `{"code": N, "message": ...}`, the status code and message this
server's gRPC surface would end the call with (runtime.grpc.handlers.abort_with), for the front
to put in its trailers.

The front answers successes itself; every error's words, status and headers stay this server's
(the texts Triton's suites pin, redaction, the from-model mark), so the two fronts answer one
failure alike. The route takes only requests carrying the front's secret token (the front is
the only client of the private socket, but it forwards clients' requests there too).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from runtime.errors import InvalidInput, ServingError
from runtime.python.model_io import ERROR_CLASSES, RESCHEDULE_REFUSED
from runtime.python.stub.model_runner import execute_failure_text

__all__ = ["OUTCOME_PATH", "TOKEN_HEADER", "FrontLink", "grpc_outcome", "outcome_error"]

logger = logging.getLogger("runtime.grpc.handlers")  # the gRPC surface's log lines

OUTCOME_PATH = "/thaw-front/outcome"
TOKEN_HEADER = "X-Thaw-Front-Token"


@dataclass(frozen=True)
class FrontLink:
    """The native front as the HTTP handlers see it: its token, its statistics to add in before
    statistics or metrics are read, and where an outcome it reports is counted."""

    token: str
    sync_stats: Callable[[], Awaitable[None]]
    # model, version, batch size, request ns, answered (else failed)
    record_outcome: Callable[[str, str, int, int, bool], None]

    def admits(self, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token.encode(), self.token.encode())


def outcome_error(doc: dict[str, Any]) -> tuple[ServingError, bool]:
    """The error the front's outcome answers, and whether it counts as an answered request in
    the statistics, as this server counts it (runtime.scheduling.batch_execution): the model's
    own error response and an output that cannot be written as JSON do; an execute that
    raised or never answered, or a stub that died, fail."""
    kind = doc.get("kind")
    instance = str(doc.get("instance", ""))
    error = str(doc.get("error", ""))
    if kind == "execute_failed":
        return ServingError(execute_failure_text(instance, error)), False
    if kind == "model_error":
        cls = ERROR_CLASSES.get(_int(doc.get("code")), ServingError)
        return cls(error, from_model=True), True
    if kind == "no_response":
        return ServingError(f"model '{doc.get('model', '')}' sent no response for a request"), False
    if kind == "unhealthy":
        text = execute_failure_text(instance, f"Stub process '{instance}' is not healthy.")
        return ServingError(text), False
    if kind == "rescheduled":  # released with RESCHEDULE by a model that cannot be
        return ServingError(RESCHEDULE_REFUSED), False
    if kind == "not_utf8":
        output = doc.get("output", "")
        message = f"output '{output}' holds bytes that are not UTF-8; request it with binary_data"
        return InvalidInput(message), True
    return ServingError(f"the native front reported an unknown outcome {str(kind)[:40]!r}"), False


def grpc_outcome(error: ServingError, redact: Callable[[str], str]) -> dict[str, Any]:
    """The gRPC status (its number) and message this server's gRPC surface ends a call that
    failed with `error` with, as runtime.grpc.handlers.abort_with does (logged as it logs)."""
    from thawserver.grpc_status import error_status  # grpc only where gRPC is served

    code = error_status(error.status, error.grpc_code)
    level = logging.WARNING if error.status >= 500 else logging.DEBUG
    logger.log(level, "gRPC %s: %s", code.name, error.message)
    return {"code": code.value[0], "message": redact(error.message)}


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 1  # INTERNAL
