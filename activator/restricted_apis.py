"""`thaw up --http-restricted-api` / `--grpc-restricted-protocol` at the activator's front doors.

Triton's restricted categories (thawwire.restricted_protocols: the flag grammar, the categories,
the header a call must carry — the same module `thaw serve` uses) checked where a cluster's
clients come in, before a request is held, counted as demand or forwarded:

    HTTP   a route of a restricted category without `<key>: <value>` ─▶ 403 Restricted
           "This API is restricted, expecting header '<key>'"; /metrics, /thaw/* and /ui are no
           Triton category and stay open (Triton's metrics port is never restricted either)
    gRPC   a method of a restricted category without `triton-grpc-protocol-<key>: <value>`
           ─▶ UNAVAILABLE "This protocol is restricted, expecting header ..." (a stream
           before any request is read; activator.grpc_surface, which owns gRPC)

With an HTTP restriction the front door hands no connection to a replica (its later requests
would skip this check): every request then goes through the activator.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

from activator.errors import Restricted
from thawwire.restricted_protocols import Category, Restriction

__all__ = ["http_guard"]

_Route = Callable[[web.Request], Awaitable[web.StreamResponse]]


def http_guard(
    restrictions: Mapping[Category, Restriction],
) -> Callable[[Category, _Route], _Route]:
    """`guard(category, handler)`: the handler, or one that first refuses a request without
    the category's header (header names case-insensitive, as HTTP's are)."""

    def guard(category: Category, handler: _Route) -> _Route:
        restriction = restrictions.get(category)
        if restriction is None:
            return handler

        async def restricted(request: web.Request) -> web.StreamResponse:
            if not restriction.allows(request.headers.items(), fold_case=True):
                raise Restricted(restriction.refusal)
            return await handler(request)

        return restricted

    return guard
