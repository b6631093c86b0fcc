"""`thaw up --http-restricted-api` / `--grpc-restricted-protocol` at the activator's front doors.

Triton's restricted categories (thawserver.restricted_protocols: the flag grammar, the categories,
the header a call must carry — the same module `thaw serve` uses) checked where a cluster's
clients come in, before a request is held, counted as demand or forwarded:

    HTTP   a route of a restricted category without `<key>: <value>` ─▶ 403 Restricted
           "This API is restricted, expecting header '<key>'"; /metrics, /thaw/status,
           /thaw/history and /ui are no Triton category and stay open (Triton's metrics port
           is never restricted either); /thaw/models/<m>/scale-to-zero is model-repository's,
           as unload
    gRPC   a method of a restricted category without `triton-grpc-protocol-<key>: <value>`
           ─▶ UNAVAILABLE "This protocol is restricted, expecting header ..." (a stream
           before any request is read; activator.surfaces.grpc_surface, which owns gRPC)

With an HTTP restriction the front door hands no connection to a replica (its later requests
would skip this check): every request then goes through the activator.
"""

from __future__ import annotations

from collections.abc import Mapping

from activator.errors import Restricted
from thawserver.restricted_protocols import Category, Restriction
from thawserver.restricted_routes import Guard, route_guard

__all__ = ["http_guard"]


def http_guard(restrictions: Mapping[Category, Restriction]) -> Guard:
    """`guard(category, handler)`: the handler, or one that first refuses a request without
    the category's header with `Restricted` (403; thawserver.restricted_routes, the wrapper
    `thaw serve` uses too)."""
    return route_guard(restrictions, Restricted)
