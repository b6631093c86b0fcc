"""SageMaker's inference surface (tritonserver's `--allow-sagemaker`) as v2 requests: a pure
function of the request and the default model.

    SageMakerRoutes(model, ping_mode)
    rewrite(routes, method, path, headers, content_length)   -> Rewrite | Refusal (pure)

`GET /ping` is `/v2/health/ready` (or `/live`, SAGEMAKER_TRITON_PING_MODE) and `POST
/invocations` an infer request of the default model (SAGEMAKER_TRITON_DEFAULT_MODEL_NAME). An
infer body is all JSON unless its Content-Type is
`application/vnd.sagemaker-triton.binary+json;json-header-size=N` (then N bytes of JSON and
binary tensors); its answer's Content-Type says the same of the response (`application/json`,
or that type with the response's JSON length), with no `Inference-Header-Content-Length`, and
neither the request nor the response is compressed, as tritonserver's SageMaker port. The
multi-model routes (`/models`) are refused with 501: thaw does not register repositories at
run time. The port's listener is a runtime.http.cloud_front.CloudFront of `rewrite`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

from aiohttp import web

from runtime.http.cloud_front import HEADER_LENGTH, Refusal, Rewrite, json_header_length

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
    """The model `/invocations` is for, and what `/ping` asks (`ready` or `live`)."""

    model: str = DEFAULT_MODEL
    ping_mode: str = "ready"


def rewrite(
    routes: SageMakerRoutes,
    method: str,
    path: str,
    headers: Mapping[str, str],
    content_length: int | None,
) -> Rewrite | Refusal:
    """The v2 request `method path` on the SageMaker port is (module docstring)."""
    if path == "/ping":
        return Rewrite(method, f"/v2/health/{routes.ping_mode}")
    if path == "/invocations":
        length = json_header_length(headers.get("Content-Type", ""), BINARY_MIME, content_length)
        if isinstance(length, Refusal):
            return length
        return Rewrite(method, f"/v2/models/{quote(routes.model, safe='')}/infer", infer=True,
                       header_length=length, drop=_UNCOMPRESSED,
                       fix=_sagemaker_content_type)  # fmt: skip
    if _MODELS.fullmatch(path):
        return Refusal(501, "SageMaker multi-model endpoints (/models) are not supported by "
                       "thaw serve: serve one model with /invocations")  # fmt: skip
    return Refusal(400, f"no SageMaker route is {path[:200]!r}: /ping or /invocations")


def _sagemaker_content_type(response: web.StreamResponse) -> None:
    """An infer answer's headers as tritonserver's SageMaker port writes them: the JSON
    length in the Content-Type, no Inference-Header-Content-Length (errors unchanged)."""
    if response.status != 200:
        return
    length = response.headers.pop(HEADER_LENGTH, None)
    response.headers["Content-Type"] = (
        BINARY_MIME + length if length is not None else "application/json"
    )
