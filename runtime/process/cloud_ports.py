"""The cloud ports of one `thaw serve` (tritonserver's `--allow-sagemaker`, `--allow-vertex-ai`):
each a listener whose requests the v2 application serves (runtime.http.cloud_front).

    ports = CloudPorts(config, app, server, listen)
    await ports.open()     SageMaker's port now; Vertex AI's once the start is done
    ports.close()          stop accepting
    await ports.shutdown(timeout_s)   let their requests in flight finish
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial

from aiohttp import web

from runtime.config import ServeConfig
from runtime.errors import ServingError
from runtime.http import sagemaker, vertex_ai
from runtime.http.app import MODELS, SERVER_STATE
from runtime.http.cloud_front import CloudFront, Rewriter
from runtime.http.sagemaker_models import MultiModelEndpoint
from thawserver.aiohttp_compat import server_beside

__all__ = ["CloudPorts", "Listen"]

logger = logging.getLogger(__name__)

# (server, app, host, port) -> the listener and its URL (runtime.process.server._listen)
Listen = Callable[[web.Server, web.Application, str, int], Awaitable[tuple[asyncio.Server, str]]]


class CloudPorts:
    """The SageMaker and Vertex AI ports `config` allows, beside the v2 app's `server`."""

    def __init__(
        self, config: ServeConfig, app: web.Application, server: web.Server, listen: Listen
    ) -> None:
        self._config = config
        self._app = app
        self._server = server
        self._listen = listen
        self._listeners: list[asyncio.Server] = []
        self._servers: list[web.Server] = []
        self._waiting: asyncio.Task[None] | None = None

    async def open(self) -> None:
        """SageMaker's port (its `/ping` says when the models are ready); Vertex AI's in the
        background, once the models to load at start are loaded (its default model is one of
        them), as tritonserver starts it. ServingError, in Triton's words, when SageMaker's
        cannot listen; Vertex AI's refusal fails the server (exit 1)."""
        config = self._config
        if config.allow_sagemaker:
            models = MultiModelEndpoint(self._app[MODELS], body_timeout_s=config.body_timeout_s)
            routes = sagemaker.SageMakerRoutes(
                config.sagemaker_model, config.sagemaker_ping_mode, models
            )
            try:
                url = await self._open(sagemaker.NAME, partial(sagemaker.rewrite, routes),
                                       config.host, config.sagemaker_port)  # fmt: skip
            except ServingError as exc:
                raise ServingError(f"failed to start SageMaker service: {exc.message}") from None
            logger.info("Started Sagemaker HTTPService at %s", url)  # Triton's words
        if config.allow_vertex_ai:
            self._waiting = asyncio.create_task(self._vertex_ai_when_started())

    async def _open(self, name: str, rewrite: Rewriter, host: str, port: int) -> str:
        front = server_beside(self._server, CloudFront(name, rewrite, self._server.request_handler))
        listener, url = await self._listen(front, self._app, host, port)
        self._listeners.append(listener)
        self._servers.append(front)
        return url.split("//", 1)[1]

    async def _vertex_ai_when_started(self) -> None:
        state = self._app[SERVER_STATE]
        await state.started.wait()
        config = self._config
        try:
            ready = [row["name"] for row in await self._app[MODELS].index(ready_only=True)]
            routes = vertex_ai.VertexRoutes.from_config(
                config.vertex_ai_predict_route,
                config.vertex_ai_health_route,
                vertex_ai.default_model(config.vertex_ai_default_model, ready),
            )
            host = config.vertex_ai_host or config.host
            rewrite = partial(vertex_ai.rewrite, routes)
            url = await self._open(vertex_ai.NAME, rewrite, host, config.vertex_ai_port)
        except ServingError as exc:
            logger.error("failed to start Vertex AI service: %s", exc.message)  # Triton's words
            state.start_error = ServingError(f"failed to start Vertex AI service: {exc.message}")
            state.failed.set()
            return
        logger.info("Started Vertex AI HTTPService at %s", url)  # Triton's words
        logger.info("Vertex AI predictions without a redirect are for model=%s", routes.model)

    async def close(self) -> None:
        """Stop accepting connections (and stop waiting to open Vertex AI's port)."""
        if self._waiting is not None:
            self._waiting.cancel()
            await asyncio.gather(self._waiting, return_exceptions=True)
        for listener in self._listeners:
            listener.close()

    async def shutdown(self, timeout_s: float) -> None:
        """Let the requests in flight on these ports finish, within `timeout_s`."""
        for server in self._servers:
            await server.shutdown(timeout_s)
