"""The activator's surfaces: the v2 REST app, the reverse proxy, gRPC, the status page.

    app                the HTTP surface: one route table, thin handlers, one error middleware
    answers            what the activator answers itself about its models (REST or gRPC)
    proxy              streaming HTTP reverse proxy to one replica; never parses bodies
    openai_proxy       the OpenAI-compatible `/v1` routes: the model list, and requests forwarded
    upstream           keep-alive HTTP/1.1 connections to replicas
    response_framing   where a replica's response body ends (RFC 9112 section 6)
    grpc_surface       the gRPC surface: THE `GRPCInferenceService` route table
    grpc_forward       forward gRPC inference to replicas as opaque bytes
    grpc_stream_relay  one client stream relayed to per-model replica streams
    grpc_calls         what a forwarded gRPC call reads of its message and its context
    grpc_transport     a replica whose gRPC connection ended under a call leaves rotation
    grpc_envelope      the model a serialized `ModelInferRequest` is for, and its sequence
    stream_sequences   the sequences a replica stream carried, reported to their routes
    shm_requests       requests naming shared-memory regions, rewritten for a replica
    restricted_apis    `--http-restricted-api` / `--grpc-restricted-protocol` here
    status_page        the status page at `/ui/` (static files in `ui/`)

Exports `build_app` and `GrpcSurface`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from activator.surfaces.app import build_app
    from activator.surfaces.grpc_surface import GrpcSurface

__all__ = ["GrpcSurface", "build_app"]

# Each export and the module that defines it, imported on first use (PEP 562), so that importing
# one module of this package does not import the others.
_EXPORTS = {
    "GrpcSurface": "activator.surfaces.grpc_surface",
    "build_app": "activator.surfaces.app",
}


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
