"""OpenAI's error shape: `{"error": {"message", "type", "param", "code"}}` with its status.

    OpenAIError (400, invalid_request_error)   a body the API refuses; `param` names the field
    from_serving(ServingError, redact)         the runtime's errors, same status, OpenAI's type

The runtime's own middleware writes `{"error": message}`; the `/v1` routes answer in the shape
the `openai` client parses (`openai.BadRequestError.body`, `.code`, `.param`). The document is
thawwire.openai_api's, which `thaw up` writes too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runtime.errors import ServingError
from thawwire.openai_api import error_body

__all__ = ["OpenAIError", "from_serving"]


class OpenAIError(Exception):
    """A refusal in OpenAI's words: `status`, `message`, and the `param` it is about."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return error_body(self.message, status=self.status, param=self.param, code=self.code)


def from_serving(exc: ServingError, redact: Callable[[str], str]) -> OpenAIError:
    """A runtime error (unknown model, not ready, a model's own failure) as an OpenAIError,
    its text through `redact` (the server's directories left out: thawserver.redaction)."""
    code = "model_not_found" if exc.status == 404 else None
    return OpenAIError(redact(exc.message), status=exc.status, code=code)
