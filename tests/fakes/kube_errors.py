"""Kubernetes `Status` errors: every error the fake API server answers is one of these.

The shapes, reasons and messages follow k8s.io/apimachinery/pkg/api/errors, so a client that
inspects `ApiException.status`, `reason` or the body's `details` sees what a real server sends.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "StatusError",
    "already_exists",
    "bad_request",
    "conflict",
    "expired",
    "forbidden",
    "invalid",
    "method_not_allowed",
    "not_found",
    "status_object",
    "unsupported_media_type",
]


def status_object(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A `v1.Status` failure body."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


class StatusError(Exception):
    """An API error carrying the HTTP status and the `Status` body that describes it."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        *,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        return status_object(self.code, self.reason, self.message, self.details)


def _details(resource: str, group: str, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": resource}
    if group:
        details["group"] = group
    return details


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, group: str, name: str) -> StatusError:
    return StatusError(
        404,
        "NotFound",
        f'{_qualified(resource, group)} "{name}" not found',
        _details(resource, group, name),
    )


def already_exists(resource: str, group: str, name: str) -> StatusError:
    return StatusError(
        409,
        "AlreadyExists",
        f'{_qualified(resource, group)} "{name}" already exists',
        _details(resource, group, name),
    )


_MODIFIED = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def conflict(resource: str, group: str, name: str, why: str | None = None) -> StatusError:
    why = why or _MODIFIED
    return StatusError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": {why}',
        _details(resource, group, name),
    )


def invalid(kind: str, group: str, name: str, causes: list[tuple[str, str]]) -> StatusError:
    """422: `causes` are (field path, message) pairs, as the real validation reports them."""
    text = "; ".join(f"{field}: {msg}" for field, msg in causes)
    details = {
        "name": name,
        "kind": kind,
        "causes": [
            {"reason": "FieldValueInvalid", "message": msg, "field": field} for field, msg in causes
        ],
    }
    if group:
        details["group"] = group
    return StatusError(
        422, "Invalid", f'{kind}.{group or "core"} "{name}" is invalid: {text}', details
    )


def bad_request(message: str) -> StatusError:
    return StatusError(400, "BadRequest", message)


def forbidden(
    user: str, verb: str, resource: str, group: str, namespace: str | None
) -> StatusError:
    scope = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
    return StatusError(
        403,
        "Forbidden",
        f'{_qualified(resource, group)} is forbidden: User "{user}" cannot {verb} resource '
        f'"{resource}" in API group "{group}"{scope}',
        {"kind": resource, **({"group": group} if group else {})},
    )


def expired(message: str) -> StatusError:
    """410: a watch or continue token older than the server's retained history."""
    return StatusError(410, "Expired", message)


def unsupported_media_type(content_type: str, accepted: list[str]) -> StatusError:
    return StatusError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{', '.join(accepted)}",
        {"causes": [{"message": f"unsupported content type {content_type!r}"}]},
    )


def method_not_allowed(method: str) -> StatusError:
    return StatusError(
        405,
        "MethodNotAllowed",
        f"the server does not allow this method on the requested resource ({method})",
    )
