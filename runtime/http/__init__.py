"""The runtime's KServe v2 REST surface (HTTP/1.1, aiohttp).

    app                the aiohttp application: THE route table, the JSON error middleware
    handlers           thin handlers: decode the request, call the ModelService, encode the answer
    response_encoding  response compression from `Accept-Encoding` (gzip, deflate)
    front_outcome      the native front's failed hot infers, answered and counted here
    cloud_front        a cloud's own port whose requests the v2 application serves, rewritten
    vertex_ai          Vertex AI's routes as v2 requests (`--allow-vertex-ai`)
    sagemaker          SageMaker's routes as v2 requests (`--allow-sagemaker`)
    sagemaker_models   SageMaker's multi-model endpoint: models loaded and unloaded at run time

Exports `build_app`, the v2 application over a ModelService.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.http.app import build_app

__all__ = ["build_app"]

# Each export and the module that defines it, imported on first use (PEP 562), so that importing
# one module of this package does not import the others.
_EXPORTS = {
    "build_app": "runtime.http.app",
}


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
