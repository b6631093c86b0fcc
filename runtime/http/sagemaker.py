"""SageMaker's inference surface (tritonserver's `--allow-sagemaker`) as v2 requests: a pure
function of the request and the default model, and the multi-model endpoint's routes.

    SageMakerRoutes(model, ping_mode, models)
    rewrite(routes, method, path, headers, content_length)   -> Rewrite | Refusal | Answer

`GET /ping` is `/v2/health/ready` (or `/live`, SAGEMAKER_TRITON_PING_MODE) and `POST
/invocations` an infer request of the default model (SAGEMAKER_TRITON_DEFAULT_MODEL_NAME). An
infer body is all JSON unless its Content-Type is
`application/vnd.sagemaker-triton.binary+json;json-header-size=N` (then N bytes of JSON and
binary tensors); its answer's Content-Type says the same of the response (`application/json`,
or that type with the response's JSON length), with no `Inference-Header-Content-Length`, and
neither the request nor the response is compressed, as tritonserver's SageMaker port. The
multi-model routes (`/models`, `/models/NAME`, `/models/NAME/invoke`) are the
runtime.http.sagemaker_models.MultiModelEndpoint's: an invocation is an infer request as
`/invocations` is (its errors 400 or 507), the rest its own answers. The port's listener is a
runtime.http.cloud_front.CloudFront of `rewrite`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

from aiohttp import web

from runtime.http.cloud_front import (
    HEADER_LENGTH,
    Answer,
    FixHeaders,
    Refusal,
    Rewrite,
    json_header_length,
)
from runtime.http.sagemaker_models import MultiModelEndpoint, invocation_status

__all__ = ["BINARY_MIME", "DEFAULT_MODEL", "NAME", "PING_MODES", "SageMakerRoutes", "rewrite"]

NAME = "SageMaker"
BINARY_MIME = "application/vnd.sagemaker-triton.binary+json;json-header-size="
# tritonserver's model name when SAGEMAKER_TRITON_DEFAULT_MODEL_NAME is not set: a request
# for it is answered "Request for unknown model: '...' is not found".
DEFAULT_MODEL = "unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"
PING_MODES = ("ready", "live")
_MODELS = re.compile(r"/models(?:/)?([^/]+)?(/invoke)?")
# Compression the SageMaker port neither reads nor writes (tritonserver: identity both ways).
_UNCOMPRESSED = ("Content-Encoding", "Accept-Encoding")


@dataclass(frozen=True)
class SageMakerRoutes:
    """The model `/invocations` is for, what `/ping` asks (`ready` or `live`), and the
    multi-model endpoint that answers `/models` (None: 501)."""

    model: str = DEFAULT_MODEL
    ping_mode: str = "ready"
    models: MultiModelEndpoint | None = None


def rewrite(
    routes: SageMakerRoutes,
    method: str,
    path: str,
    headers: Mapping[str, str],
    content_length: int | None,
) -> Rewrite | Refusal | Answer:
    """The v2 request `method path` on the SageMaker port is (module docstring)."""
    if path == "/ping":
        return Rewrite(method, f"/v2/health/{routes.ping_mode}")
    if path == "/invocations":
        return _infer(method, routes.model, headers, content_length, _sagemaker_content_type)
    if (found := _MODELS.fullmatch(path)) is not None:
        if routes.models is None:
            return Refusal(501, "SageMaker multi-model endpoints (/models) are not served here")
        name, invoke = found.group(1) or "", found.group(2) is not None
        return routes.models.route(
            method, name, invoke, headers,
            lambda model: _infer(method, model, headers, content_length, _invocation_headers),
        )  # fmt: skip
    return Refusal(400, f"no SageMaker route is {path[:200]!r}: /ping, /invocations or /models")


def _infer(
    method: str,
    model: str,
    headers: Mapping[str, str],
    content_length: int | None,
    fix: FixHeaders,
) -> Rewrite | Refusal:
    """An infer request of `model` whose body is as SageMaker's Content-Type says."""
    length = json_header_length(headers.get("Content-Type", ""), BINARY_MIME, content_length)
    if isinstance(length, Refusal):
        return length
    return Rewrite(method, f"/v2/models/{quote(model, safe='')}/infer",
                   infer=True, header_length=length, drop=_UNCOMPRESSED, fix=fix)  # fmt: skip


def _invocation_headers(response: web.StreamResponse) -> None:
    """A multi-model invocation's answer: SageMaker's headers, and its errors' statuses."""
    invocation_status(response)
    _sagemaker_content_type(response)


def _sagemaker_content_type(response: web.StreamResponse) -> None:
    """An infer answer's headers as tritonserver's SageMaker port writes them: the JSON
    length in the Content-Type, no Inference-Header-Content-Length (errors unchanged)."""
    if response.status != 200:
        return
    length = response.headers.pop(HEADER_LENGTH, None)
    response.headers["Content-Type"] = (
        BINARY_MIME + length if length is not None else "application/json"
    )
