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
from activator.model_endpoint import ModelEndpoint
from activator.replica_stats import ModelStatistics
from activator.repository import Repository
from activator.scaler.backend import ScalerBackend
from activator.scaler.factory import open_backend
from activator.status_document import ModelStatus, StatusDocument
from tritonconfig import composing_models, is_ensemble, sequence_idle_us

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
        self.backend: ScalerBackend = backend or open_backend(config, session)
        self.endpoints = {
            name: ModelEndpoint(
                name,
                repository.get(name).settings,
                self.backend,
                metrics,
                drain_timeout_s=config.drain_timeout_s,
                stats=ModelStatistics(name, session),
                sequence_idle_s=_sequence_idle_s(repository, name),
            )
            for name in repository.names()
        }
        # Per ensemble, every model its steps run (through nested ensembles too).
        self.composing = {name: _composing(repository, name) for name in repository.names()}
        self.image_builds: dict[str, str] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def wake_composing(self, name: str) -> None:
        """An ensemble was asked: wake every model its steps will call, all at once."""
        for model in self.composing.get(name, ()):
            endpoint = self.endpoints.get(model)
            if endpoint is not None:
                endpoint.expect_request()

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
        # An ensemble has no files of its own: nothing to build an image from.
        names = [
            n for n in self.repository.names() if not is_ensemble(self.repository.get(n).config)
        ]
        dirs = [self.repository.get(n).directory for n in names]
        command = [sys.executable, "-m", "thaw.cli"]
        self.image_builds = {n: "building" for n in names}
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
            image_builds=dict(self.image_builds),
        )


def _sequence_idle_s(repository: Repository, name: str) -> float | None:
    idle_us = sequence_idle_us(repository.get(name).config)
    return idle_us / 1e6 if idle_us is not None else None


def _composing(repository: Repository, name: str) -> tuple[str, ...]:
    """The models an ensemble's steps run, nested ensembles expanded (() for a model)."""
    found: dict[str, None] = {}
    pending = composing_models(repository.get(name).config)
    while pending:
        model = pending.pop(0)
        if model in found or model == name or model not in repository.names():
            continue
        found[model] = None
        pending += composing_models(repository.get(model).config)
    return tuple(found)
