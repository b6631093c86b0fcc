"""thawserver.restricted_routes, the one `--http-restricted-api` route wrapper, on both servers'
real applications over loopback: the same refusal through each server's own error type."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from activator.errors import Restricted as ActivatorRestricted
from activator.surfaces.restricted_apis import http_guard
from runtime.config import ServeConfig
from runtime.errors import Restricted as ServeRestricted
from runtime.http.app import RUNNER_OPTIONS, build_app
from tests.fakes.model_service import FakeModelService
from thawserver.restricted_protocols import Category, parse_http_restrictions
from thawserver.restricted_routes import route_guard

REFUSAL = {"error": "This API is restricted, expecting header 'X-Key'"}


async def _ok(request: web.Request) -> web.StreamResponse:
    return web.Response(text="ok")


class _NoMetrics:
    def exposition(self) -> bytes:
        return b""


@pytest.fixture
async def serve() -> AsyncIterator[TestClient]:
    """`thaw serve`'s v2 app with the health category restricted."""
    config = ServeConfig(repository=Path("."), http_restricted_apis=("health:X-Key=s3cret",))
    server = TestServer(build_app(config, FakeModelService(), _NoMetrics()))  # type: ignore[arg-type]
    await server.start_server(**RUNNER_OPTIONS)
    async with TestClient(server) as client:
        yield client


async def test_thaw_serve_refuses_a_restricted_route_without_its_header(
    serve: TestClient,
) -> None:
    refused = await serve.get("/v2/health/live")
    assert refused.status == 403 and await refused.json() == REFUSAL
    wrong = await serve.get("/v2/health/live", headers={"X-Key": "S3CRET"})  # values exact
    assert wrong.status == 403
    allowed = await serve.get("/v2/health/live", headers={"x-key": "s3cret"})  # names folded
    assert allowed.status == 200
    # Another category is not restricted.
    assert (await serve.get("/v2")).status == 200


async def test_thaw_up_guard_answers_the_same_through_its_own_error() -> None:
    @web.middleware
    async def as_json(request: web.Request, handler: web.Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ActivatorRestricted as exc:
            return web.json_response({"error": exc.message}, status=exc.status)

    guard = http_guard(parse_http_restrictions(["health:X-Key=s3cret"]))
    app = web.Application(middlewares=[as_json])
    app.router.add_get("/v2/health/live", guard(Category.HEALTH, _ok))
    async with TestClient(TestServer(app)) as client:
        refused = await client.get("/v2/health/live")
        assert refused.status == 403 and await refused.json() == REFUSAL
        assert (await client.get("/v2/health/live", headers={"X-KEY": "s3cret"})).status == 200


def test_an_unrestricted_category_keeps_its_handler_and_each_server_its_error() -> None:
    restrictions = parse_http_restrictions(["inference:X-Key=s3cret"])
    guard = route_guard(restrictions, ServeRestricted)
    assert guard(Category.HEALTH, _ok) is _ok  # nothing added per request
    assert guard(Category.INFERENCE, _ok) is not _ok
    assert ServeRestricted.status == ActivatorRestricted.status == 403
