"""The runtime's gRPC surface: Triton's `inference.GRPCInferenceService` (grpc.aio).

    server          the gRPC listener: bound, capped, stopped
    handlers        thin handlers: decode the message, call the ModelService, encode it
    stream          one `ModelStreamInfer` call: requests in, each one's responses out

Exports `GrpcServer` and `GrpcHandlers`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.grpc.handlers import GrpcHandlers
    from runtime.grpc.server import GrpcServer

__all__ = ["GrpcHandlers", "GrpcServer"]

# Each export and the module that defines it, imported on first use (PEP 562), so that importing
# one module of this package does not import the others.
_EXPORTS = {
    "GrpcHandlers": "runtime.grpc.handlers",
    "GrpcServer": "runtime.grpc.server",
}


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
