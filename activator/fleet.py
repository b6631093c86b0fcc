"""All model endpoints of one `thaw up`: their scaler backend, autoscaling tick and shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys

import aiohttp

from activator.config import ActivatorConfig
from activator.errors import UnknownModel
from activator.image_builder import ImageJobs, ImageState
from activator.metrics import Metrics
from activator.model_endpoint import ModelEndpoint
from activator.replica_stats import ModelStatistics
from activator.repository import Repository
from activator.scaler.backend import ScalerBackend
from activator.scaler.factory import open_backend
from activator.status_document import ModelState, ModelStatus, StatusDocument

__all__ = ["Fleet"]

logger = logging.getLogger(__name__)

_CACHE_METRICS_EVERY_S = 15.0


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
        self.backend: ScalerBackend = backend or open_backend(config, session)
        self.endpoints = {
            name: ModelEndpoint(
                name,
                repository.get(name).settings,
                self.backend,
                metrics,
                drain_timeout_s=config.drain_timeout_s,
                stats=ModelStatistics(name, session),
            )
            for name in repository.names()
        }
        self.images: ImageJobs | None = None
        if config.build_images and config.cache_dir is not None:
            dirs = [repository.get(n).directory for n in repository.names()]
            command = [sys.executable, "-m", "thaw.cli"]
            host = None
            if config.host_cache_dir is not None and config.host_cache_bytes > 0:
                host = (config.host_cache_dir, config.host_cache_bytes)
            self.images = ImageJobs(
                command, dirs, config.cache_dir, store=config.store, timeout_s=600.0,
                host_tier=host,
            )  # fmt: skip
        self._tasks: list[asyncio.Task[None]] = []
        metrics.watch_caches(config.cache_dir, config.host_cache_dir)

    def endpoint(self, name: str) -> ModelEndpoint:
        self.repository.get(name)  # validates the name, raises UnknownModel
        endpoint = self.endpoints.get(name)
        if endpoint is None:
            raise UnknownModel(f"unknown model: '{name}'")
        return endpoint

    async def start(self) -> None:
        """Adopt replicas that already run; start ticking; bring min_replicas up; kick off
        background image builds."""
        await asyncio.gather(*(e.adopt_running() for e in self.endpoints.values()))
        self._tasks.append(asyncio.create_task(self._tick_loop()))
        self._tasks.append(asyncio.create_task(self._cache_loop()))
        if self.images is not None:
            self._tasks.append(asyncio.create_task(self._run_images(self.images)))
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
                if self.images is not None and endpoint.state is ModelState.WAKING:
                    self.images.wanted(endpoint.name)
            self.metrics.observe_pool(self.backend.pool_status())

    async def _cache_loop(self) -> None:
        """The image caches' metrics, re-read in a thread now and then (files on disk)."""
        while True:
            await asyncio.to_thread(self.metrics.refresh_caches)
            await asyncio.sleep(_CACHE_METRICS_EVERY_S)

    @staticmethod
    async def _run_images(images: ImageJobs) -> None:
        await images.run()

    @property
    def image_states(self) -> dict[str, str]:
        """Each model's image state (activator.image_builder.ImageState)."""
        if self.images is not None:
            return dict(self.images.states)
        return dict.fromkeys(self.repository.names(), ImageState.UNKNOWN.value)

    def ready(self) -> bool:
        """Whether `thaw up` can wake a model at full speed: its warm pool has produced its
        first idle process (or it keeps none, or its processes fail to start: then waiting
        helps nobody)."""
        pool = self.backend.pool_status()
        return pool.ready > 0 or pool.size == 0 or pool.starts > 0 or pool.failures > 0

    async def close(self) -> None:
        """Graceful stop: fail held requests, drain every replica, stop the pool."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await asyncio.gather(*(e.close() for e in self.endpoints.values()))
        await self.backend.close()

    def status(self) -> StatusDocument:
        """The status document (`GET /thaw/status`): every repository model, those it
        cannot serve included, by name; the warm pool; the start-up image builds."""
        models = [e.status() for e in self.endpoints.values()]
        for name, reason in self.repository.unavailable.items():
            models.append(ModelStatus.unavailable(name, reason))
        return StatusDocument(
            models=tuple(sorted(models, key=lambda m: m.model)),
            warm_pool=self.backend.pool_status(),
            image_builds=self.image_states,
        )
