"""All model endpoints of one `thaw up`: their scaler backend, autoscaling tick and shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys

import aiohttp

from activator.config import ActivatorConfig
from activator.errors import UnknownModel
from activator.image_builder import build_images
from activator.metrics import Metrics
from activator.metrics_text import render
from activator.model_endpoint import ModelEndpoint
from activator.replica_metrics import ModelMetrics, merge_families
from activator.replica_stats import ModelStatistics
from activator.repository import Repository
from activator.scaler.backend import AsyncLifecycle, ScalerBackend
from activator.scaler.factory import open_backend
from activator.status_document import ModelStatus, StatusDocument

__all__ = ["Fleet"]

logger = logging.getLogger(__name__)


class Fleet:
    """Owns one ModelEndpoint per repository model and ticks their autoscalers.

    `backend` runs the replicas: the one given (tests), else the one `config.scaler` names.
    """

    def __init__(
        self,
        config: ActivatorConfig,
        repository: Repository,
        metrics: Metrics,
        session: aiohttp.ClientSession,
        *,
        backend: ScalerBackend | None = None,
    ) -> None:
        self.config = config
        self.repository = repository
        self.metrics = metrics
        self.session = session
        self.backend: ScalerBackend = backend or open_backend(config, session, metrics)
        self.endpoints = {
            name: ModelEndpoint(
                name,
                repository.get(name).settings,
                self.backend,
                metrics,
                drain_timeout_s=config.drain_timeout_s,
                stats=ModelStatistics(name, session, metrics=ModelMetrics(session)),
            )
            for name in repository.names()
        }
        self.image_builds: dict[str, str] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def endpoint(self, name: str) -> ModelEndpoint:
        self.repository.get(name)  # validates the name, raises UnknownModel
        endpoint = self.endpoints.get(name)
        if endpoint is None:
            raise UnknownModel(f"unknown model: '{name}'")
        return endpoint

    async def start(self) -> None:
        """Adopt replicas that already run; start ticking; bring min_replicas up; kick off
        background image builds."""
        if isinstance(self.backend, AsyncLifecycle):
            await self.backend.start()
        await asyncio.gather(*(e.adopt_running() for e in self.endpoints.values()))
        self._tasks.append(asyncio.create_task(self._tick_loop()))
        cfg = self.config
        if cfg.build_images and cfg.store is None and cfg.cache_dir is not None:
            self._tasks.append(asyncio.create_task(self._build_images()))
        for endpoint in self.endpoints.values():
            endpoint.tick()

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.tick_s)
            for endpoint in self.endpoints.values():
                try:
                    endpoint.tick()
                except Exception:
                    logger.exception("model=%s autoscaler tick failed", endpoint.name)

    async def _build_images(self) -> None:
        assert self.config.cache_dir is not None  # checked by start()
        dirs = [self.repository.get(n).directory for n in self.repository.names()]
        command = [sys.executable, "-m", "thaw.cli"]
        self.image_builds = {n: "building" for n in self.repository.names()}
        self.image_builds = await build_images(
            command, dirs, self.config.cache_dir, timeout_s=600.0
        )

    async def close(self) -> None:
        """Graceful stop: fail held requests, drain every replica, stop the pool."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if isinstance(self.backend, AsyncLifecycle):
            await self.backend.release()  # its replicas outlive this activator
        await asyncio.gather(*(e.close() for e in self.endpoints.values()))
        await self.backend.close()

    async def replica_metrics(self) -> str:
        """Every model's replicas' series (activator.replica_metrics), as exposition text."""
        pages = await asyncio.gather(*(e.metric_families() for e in self.endpoints.values()))
        return render(merge_families(pages).values())

    def status(self) -> StatusDocument:
        """The status document (`GET /thaw/status`): every repository model, those it
        cannot serve included, by name; the warm pool; the start-up image builds."""
        models = [e.status() for e in self.endpoints.values()]
        for name, reason in self.repository.unavailable.items():
            models.append(ModelStatus.unavailable(name, reason))
        return StatusDocument(
            models=tuple(sorted(models, key=lambda m: m.model)),
            warm_pool=self.backend.pool_status(),
            image_builds=dict(self.image_builds),
        )
