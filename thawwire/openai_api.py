"""The OpenAI-compatible API both servers answer: its paths, its model and error documents.

`thaw serve` answers these paths itself (runtime.openai); `thaw up` answers the model list from
its repository and forwards the rest to a replica of the body's `model`, so both write errors in
the one shape the `openai` client parses: `{"error": {"message", "type", "param", "code"}}`.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CHAT_COMPLETIONS",
    "COMPLETIONS",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_MAX_TOOL_CALL_PARSE_BYTES",
    "EMBEDDINGS",
    "GENERATION_PATHS",
    "HEALTH_READY",
    "MAX_TOKENS_LIMIT",
    "MODEL",
    "MODELS",
    "MODEL_LOAD",
    "MODEL_UNLOAD",
    "OWNED_BY",
    "TOOL_CALL_PARSERS",
    "error_body",
    "error_type",
    "is_openai_path",
    "model_object",
    "no_route_message",
]

MODELS = "/v1/models"
MODEL = "/v1/models/{model}"
COMPLETIONS = "/v1/completions"
CHAT_COMPLETIONS = "/v1/chat/completions"
EMBEDDINGS = "/v1/embeddings"
# Triton's OpenAI frontend's own routes beside the API (`thaw serve` answers them).
HEALTH_READY = "/health/ready"
MODEL_LOAD = "/v1/models/{model}/load"
MODEL_UNLOAD = "/v1/models/{model}/unload"
# The most tokens a completion or chat generates when the request sets no `max_tokens` (nor
# `max_completion_tokens`): Triton's OpenAI frontend's default, which `--default-max-tokens`
# sets on both servers; and the most any request, or the flag, may ask for.
DEFAULT_MAX_TOKENS = 16
MAX_TOKENS_LIMIT = 1 << 20
# The tool-call parsers `--tool-call-parser` names (Triton's frontend's names), and its default
# bound on the text one streamed answer's parser reads (128 KiB).
TOOL_CALL_PARSERS = ("llama3", "mistral")
DEFAULT_MAX_TOOL_CALL_PARSE_BYTES = 128 * 1024
# Every model's `owned_by`: Triton's frontend's words, so clients written against it (and
# Triton's own tests) see the same list.
OWNED_BY = "Triton Inference Server"
# The paths whose JSON body names the model that answers (`"model": ...`).
GENERATION_PATHS = (CHAT_COMPLETIONS, COMPLETIONS, EMBEDDINGS)

# OpenAI's `type` for each refusal status both servers answer.
_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    408: "timeout_error",
    429: "rate_limit_error",
}


def error_type(status: int) -> str:
    """OpenAI's `type` for an error answered with `status`."""
    if status >= 500:
        return "server_error"
    return _TYPES.get(status, "invalid_request_error")


def error_body(
    message: str, *, status: int, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """The JSON document of one error answered with `status`."""
    return {"error": {"message": message, "type": error_type(status), "param": param, "code": code}}


def model_object(name: str, created: int) -> dict[str, Any]:
    """One entry of `/v1/models` (`created`: when the server started, seconds since the epoch)."""
    return {"id": name, "object": "model", "created": created, "owned_by": OWNED_BY}


def is_openai_path(path: str) -> bool:
    """Whether a request for `path` is the OpenAI API's, whose every error is `error_body`'s
    document (`/v1` and below, on both servers)."""
    return path == "/v1" or path.startswith("/v1/")


def no_route_message(method: str, path: str) -> str:
    """Both servers' words for a `/v1` path they do not answer (the `openai` client's
    `client.responses`, say): which routes they do."""
    return (
        f"Invalid URL ({method} {path[:200]}): the OpenAI API here is GET {MODELS}, "
        f"POST {COMPLETIONS}, {CHAT_COMPLETIONS} and {EMBEDDINGS}"
    )
