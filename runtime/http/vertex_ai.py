"""Vertex AI's prediction surface (tritonserver's `--allow-vertex-ai`): each request on the
Vertex AI port becomes a request of the v2 application, served by it as any other.

    VertexRoutes.from_config(...)    the health and predict routes and the default model
    rewrite(routes, method, path, headers, content_length)   -> Rewrite | Refusal (pure)

The port's listener is a runtime.http.cloud_front.CloudFront of `rewrite`.

Vertex AI sends health checks to `AIP_HEALTH_ROUTE` (answered as `/v2/health/ready`) and
predictions to `AIP_PREDICT_ROUTE` (an infer request of the default model), each route a
regular expression the whole path must match, as tritonserver's. A predict request with
`X-Vertex-Ai-Triton-Redirect: v2/...` reaches that v2 endpoint instead (Triton's list: server
and model metadata, health, readiness, config, statistics, infer, metrics, shared-memory,
repository index and load/unload), with the method that endpoint takes. An infer request's
body is its JSON, unless its Content-Type is
`application/vnd.vertex-ai-triton.binary+json;json-header-size=N`: then the first N bytes are
the JSON and the rest binary tensors (the `Inference-Header-Content-Length` of the v2 surface).
Anything else is refused with 400, a redirect by another method than POST with 405.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

from runtime.errors import ServingError
from runtime.http.cloud_front import Refusal, Rewrite, json_header_length

__all__ = ["BINARY_MIME", "NAME", "REDIRECT_HEADER", "VertexRoutes", "default_model", "rewrite"]

NAME = "Vertex AI"

BINARY_MIME = "application/vnd.vertex-ai-triton.binary+json;json-header-size="
REDIRECT_HEADER = "X-Vertex-Ai-Triton-Redirect"

# The v2 endpoints a redirect may name (tritonserver 2.51's src/vertex_ai_server.cc).
_MODEL = re.compile(r"/v2/models/([^/]+)(?:/versions/([0-9]+))?(?:/(infer|ready|config|stats))?")
_HEALTH = re.compile(r"/v2/health/(?:live|ready)")
_SHARED_MEMORY = re.compile(
    r"/v2/(?:system|cuda)sharedmemory(?:/region/[^/]+)?/(status|register|unregister)"
)
_REPOSITORY = re.compile(r"/v2/repository(?:/[^/]+)?/(?:index|models/[^/]+/(?:load|unload))")
# Read endpoints a redirect reaches by GET (Vertex AI sends every prediction as a POST).
_GETS = ("/metrics", "/v2/models/stats", "/v2")


@dataclass(frozen=True)
class VertexRoutes:
    """The Vertex AI surface of one server: its two routes (regular expressions the whole
    request path must match) and the model a plain prediction is for."""

    predict: re.Pattern[str]
    health: re.Pattern[str]
    model: str

    @classmethod
    def from_config(cls, predict_route: str, health_route: str, model: str) -> VertexRoutes:
        """The routes as `AIP_PREDICT_ROUTE` and `AIP_HEALTH_ROUTE` give them; ServingError in
        tritonserver's words when one is not set (a route that is not a regular expression is
        refused too)."""
        if not predict_route:
            # Triton's words, its misspelling included: launch scripts grep them.
            raise ServingError("API_PREDICT_ROUTE is not defined for Vertex AI endpoint")
        if not health_route:
            raise ServingError("AIP_HEALTH_ROUTE is not defined for Vertex AI endpoint")
        patterns = []
        for name, route in (("AIP_PREDICT_ROUTE", predict_route),
                            ("AIP_HEALTH_ROUTE", health_route)):  # fmt: skip
            try:
                patterns.append(re.compile(route))
            except re.error as exc:
                raise ServingError(f"{name} {route!r} is not a regular expression: {exc}") from None
        return cls(predict=patterns[0], health=patterns[1], model=model)


def default_model(named: str, ready: list[str]) -> str:
    """The model a prediction without a redirect is for: `named` (`--vertex-ai-default-model`)
    if one is, else the repository's one model. `ready`: a name per READY model version (the
    ready index). ServingError in tritonserver's words when there is no such model."""
    if not named:
        if len(ready) != 1:
            raise ServingError(
                "Expect the model repository contains only a single model if default model "
                "is not specified"
            )
        return ready[0]
    if named not in ready:
        raise ServingError(f"Expect the default model '{named}' is loaded")
    return named


def rewrite(
    routes: VertexRoutes,
    method: str,
    path: str,
    headers: Mapping[str, str],
    content_length: int | None,
) -> Rewrite | Refusal:
    """The v2 request `method path` on the Vertex AI port is (module docstring)."""
    if routes.health.fullmatch(path):
        return Rewrite(method, "/v2/health/ready")
    if not routes.predict.fullmatch(path):
        return Refusal(400, f"no Vertex AI route is {path[:200]!r}: the health route or the "
                       "predict route")  # fmt: skip
    redirect = headers.get(REDIRECT_HEADER)
    if redirect is None:
        return _infer(method, f"/v2/models/{quote(routes.model, safe='')}/infer", headers,
                      content_length)  # fmt: skip
    if method != "POST":
        return Refusal(405, f"a {REDIRECT_HEADER} request must be a POST, not {method[:20]}")
    endpoint = "/" + redirect
    model = _MODEL.fullmatch(endpoint)
    if model is not None:
        if model.group(3) == "infer":
            return _infer("POST", endpoint, headers, content_length)
        return Rewrite("GET", endpoint)
    if endpoint in _GETS or _HEALTH.fullmatch(endpoint):
        return Rewrite("GET", endpoint)
    shared_memory = _SHARED_MEMORY.fullmatch(endpoint)
    if shared_memory is not None:
        return Rewrite("GET" if shared_memory.group(1) == "status" else "POST", endpoint)
    if _REPOSITORY.fullmatch(endpoint):
        return Rewrite("POST", endpoint)
    return Refusal(400, f"{REDIRECT_HEADER} {redirect[:200]!r} names no endpoint Vertex AI "
                   "requests may reach")  # fmt: skip


def _infer(
    method: str, path: str, headers: Mapping[str, str], content_length: int | None
) -> Rewrite | Refusal:
    """An infer request, its JSON's length read from its Content-Type (tritonserver's
    `VertexAiAPIServer::GetInferenceHeaderLength`)."""
    length = json_header_length(headers.get("Content-Type", ""), BINARY_MIME, content_length)
    if isinstance(length, Refusal):
        return length
    return Rewrite(method, path, infer=True, header_length=length)
