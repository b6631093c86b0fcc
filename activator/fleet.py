"""All model endpoints of one `thaw up`: their scaler backend, autoscaling tick and shutdown.

Each tick also feeds what the status page shows over time: every model's cost ledger
(activator.cost) and, once per history interval, a sample of every model (activator.history).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Callable

import aiohttp

from activator.config import ActivatorConfig
from activator.cost import CostFigures, CostLedger
from activator.errors import UnknownModel
from activator.history import History, HistorySlice, Sample
from activator.image_builder import ImageJobs
from activator.metrics import Metrics
from activator.metrics_text import render
from activator.model_endpoint import ModelEndpoint
from activator.replica_config import ReplicaConfigs
from activator.replica_metrics import ModelMetrics, merge_families
from activator.replica_stats import ModelStatistics
from activator.repository import Repository
from activator.scaler.backend import AsyncLifecycle, ScalerBackend
from activator.scaler.factory import open_backend
from activator.status_document import (
    ColdStartReport,
    CostReport,
    ImageState,
    ModelState,
    ModelStatus,
    StatusDocument,
)
from tritonconfig import composing_models, is_ensemble, sequence_idle_us

__all__ = ["RECENT_COLD_STARTS", "Fleet"]

logger = logging.getLogger(__name__)

RECENT_COLD_STARTS = 20
"""Cold starts the status document lists (newest first, all models)."""

_CACHE_METRICS_EVERY_S = 15.0
_STARTING = (ModelState.WAKING, ModelState.WAITING_FOR_NODE)


class Fleet:
    """Owns one ModelEndpoint per repository model and ticks their autoscalers.

    `backend` runs the replicas: the one given (tests), else the one `config.scaler` names.
    `clock` is the endpoints' monotonic clock; `wall` (Unix time) dates the history samples.
    """

    def __init__(
        self,
        config: ActivatorConfig,
        repository: Repository,
        metrics: Metrics,
        session: aiohttp.ClientSession,
        *,
        backend: ScalerBackend | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.repository = repository
        self.metrics = metrics
        self.session = session
        self._clock = clock
        self._wall = wall
        self.backend: ScalerBackend = backend or open_backend(config, session, metrics)
        self.endpoints = {
            name: ModelEndpoint(
                name,
                repository.get(name).settings,
                self.backend,
                metrics,
                drain_timeout_s=config.drain_timeout_s,
                stats=ModelStatistics(name, session, metrics=ModelMetrics(session)),
                clock=clock,
                sequence_idle_s=_sequence_idle_s(repository, name),
            )
            for name in repository.names()
        }
        now = clock()
        self._ledgers = {
            name: CostLedger(name, gpus_per_replica=repository.get(name).gpus_per_replica, now=now)
            for name in repository.names()
        }
        self.history = History(
            repository.names(),
            capacity=config.history_samples,
            interval_s=config.history_interval_s,
        )
        metrics.report_cost(self.cost_figures)
        self._states: dict[str, ModelState] = {}
        for name in repository.unavailable:
            self._publish_state(name, ModelState.UNAVAILABLE)
        # Per ensemble, every model its steps run (through nested ensembles too).
        self.composing = {name: _composing(repository, name) for name in repository.names()}
        # An ensemble has no files of its own: nothing to build or pull an image of.
        self._ensembles = [n for n in repository.names() if is_ensemble(repository.get(n).config)]
        self.images: ImageJobs | None = None
        if config.build_images and config.cache_dir is not None:
            dirs = [
                repository.get(n).directory for n in repository.names() if n not in self._ensembles
            ]
            command = [sys.executable, "-m", "thaw.cli"]
            host = None
            if config.host_cache_dir is not None and config.host_cache_bytes > 0:
                host = (config.host_cache_dir, config.host_cache_bytes)
            self.images = ImageJobs(
                command, dirs, config.cache_dir, store=config.store, timeout_s=600.0,
                host_tier=host,
            )  # fmt: skip
        # Configs a python model's own auto_complete_config completes, asked of a replica.
        self.replica_configs = ReplicaConfigs(session, timeout_s=config.request_timeout_s)
        self._tasks: list[asyncio.Task[None]] = []
        metrics.watch_caches(config.cache_dir, config.host_cache_dir)

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
        if isinstance(self.backend, AsyncLifecycle):
            await self.backend.start()
        await asyncio.gather(*(e.adopt_running() for e in self.endpoints.values()))
        self._tasks.append(asyncio.create_task(self._tick_loop()))
        self._tasks.append(asyncio.create_task(self._cache_loop()))
        if self.images is not None:
            self._tasks.append(asyncio.create_task(self._run_images(self.images)))
        for endpoint in self.endpoints.values():
            endpoint.tick()
        self.observe()

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.tick_s)
            for endpoint in self.endpoints.values():
                try:
                    endpoint.tick()
                except Exception:
                    logger.exception("model=%s autoscaler tick failed", endpoint.name)
                if self.images is not None and endpoint.state in _STARTING:
                    self.images.wanted(endpoint.name)
            try:
                self.metrics.observe_pool(self.backend.pool_status())
                self.observe()
            except Exception:  # a bug here must not stop the ticks that scale the models
                logger.exception("status page sampling failed")

    def observe(self) -> None:
        """Bring every cost ledger up to now; record a history sample when one is due."""
        now = self._clock()
        for name, endpoint in self.endpoints.items():
            self._ledgers[name].observe(
                now, running=endpoint.running_count, ready=endpoint.ready_count
            )
            if self._states.get(name) != endpoint.state:
                self._publish_state(name, endpoint.state)
        wall = self._wall()
        if not self.history.due(wall):
            return
        samples = {
            name: Sample(
                ready=e.ready_count,
                running=e.running_count,
                held=e.held_count,
                in_flight=sum(r.in_flight for r in e.replicas),
                replica_seconds=self._ledgers[name].figures(now).replica_seconds,
            )
            for name, e in self.endpoints.items()
        }
        self.history.record(wall, samples)

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
        """Each model's image state (activator.status_document.ImageState); an ensemble's is
        always "no weights" (it has no files to image)."""
        if self.images is not None:
            states = dict(self.images.states)
        else:
            states = dict.fromkeys(self.repository.names(), ImageState.UNKNOWN.value)
        states.update(dict.fromkeys(self._ensembles, ImageState.NO_WEIGHTS.value))
        return dict(sorted(states.items()))

    def ready(self) -> bool:
        """Whether `thaw up` can wake a model at full speed: its warm pool has produced its
        first idle process (or it keeps none, or its processes fail to start: then waiting
        helps nobody). A pool that does not start processes itself (no `source`: Kubernetes,
        where the cluster brings pool pods up and every activator must stay in its Service
        while they come and go) never holds readiness back."""
        pool = self.backend.pool_status()
        if not pool.source:
            return True
        return pool.ready > 0 or pool.size == 0 or pool.starts > 0 or pool.failures > 0

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

    def _publish_state(self, model: str, state: ModelState) -> None:
        self._states[model] = state
        for each in ModelState:
            self.metrics.model_state.labels(model, each.value).set(1 if each is state else 0)

    def cost_figures(self) -> list[CostFigures]:
        """Every served model's cost accounting up to now (by name)."""
        now = self._clock()
        return [self._ledgers[name].figures(now) for name in sorted(self._ledgers)]

    def cold_starts(self) -> tuple[ColdStartReport, ...]:
        """The last RECENT_COLD_STARTS cold starts of all models, newest first."""
        every = [c for e in self.endpoints.values() for c in e.cold_starts]
        every.sort(key=lambda c: c.began_unix, reverse=True)
        return tuple(every[:RECENT_COLD_STARTS])

    def history_since(self, seq: int) -> HistorySlice:
        """The history samples after number `seq` (`GET /thaw/history?since=`)."""
        return self.history.since(seq)

    def status(self) -> StatusDocument:
        """The status document (`GET /thaw/status`): every repository model, those it
        cannot serve included, by name; the warm pool; the start-up image builds; the last
        cold starts; every model's cost."""
        models = [e.status() for e in self.endpoints.values()]
        for name, reason in self.repository.unavailable.items():
            models.append(ModelStatus.unavailable(name, reason))
        return StatusDocument(
            models=tuple(sorted(models, key=lambda m: m.model)),
            warm_pool=self.backend.pool_status(),
            image_builds=self.image_states,
            cold_starts=self.cold_starts(),
            cost=CostReport(self.config.gpu_hour_price, tuple(self.cost_figures())),
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
