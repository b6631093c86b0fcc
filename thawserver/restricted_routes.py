"""The HTTP route wrapper of `--http-restricted-api`, for both servers: a route of a restricted
category answers a request without the category's header with the server's own 403 error.

The restrictions are parsed once (thawserver.restricted_protocols, by each server's config);
this wraps the routes. Each server passes its error factory (`thaw serve`'s and `thaw up`'s
`Restricted`), so each error middleware renders the refusal as it renders every error:
`{"error": "This API is restricted, expecting header '<key>'"}`, status 403.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

from thawserver.restricted_protocols import Category, Restriction

__all__ = ["Guard", "Route", "route_guard"]

Route = Callable[[web.Request], Awaitable[web.StreamResponse]]
# `guard(category, handler)`: the handler, checked when the category is restricted.
Guard = Callable[[Category, Route], Route]


def route_guard(
    restrictions: Mapping[Category, Restriction], refuse: Callable[[str], Exception]
) -> Guard:
    """`guard(category, handler)`: `handler` itself for a category no restriction names (no
    cost per request), else a handler that first raises `refuse(refusal)` for a request
    without the header and value (header names case-insensitive, as HTTP's are)."""

    def guard(category: Category, handler: Route) -> Route:
        restriction = restrictions.get(category)
        if restriction is None:
            return handler

        async def restricted(request: web.Request) -> web.StreamResponse:
            if not restriction.allows(request.headers.items(), fold_case=True):
                raise refuse(restriction.refusal)
            return await handler(request)

        return restricted

    return guard
