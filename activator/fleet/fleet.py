"""All model endpoints of one `thaw up`: their scaler backend, autoscaling tick and shutdown.

One record per served model (`FleetModel`: its endpoint, cost ledger, ensemble steps and last
published state); records come and go as the repository is read again (`add_model`,
`renew_model`, `drop_model`, driven by activator.fleet.reload). Each tick also feeds what the
status page shows over time: every model's cost ledger (activator.observe.cost) and, once per
history interval, a sample of every model (activator.observe.history).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import aiohttp

from activator.config import ActivatorConfig, BoundAddresses
from activator.endpoint.model_endpoint import ModelEndpoint
from activator.endpoint.replica_metrics import (
    ModelMetrics,
    merge_families,
    with_held,
    with_zeros,
)
from activator.endpoint.replica_stats import ModelStatistics
from activator.endpoint.shared_limit import SharedLimits
from activator.errors import UnknownModel
from activator.fleet import rate_limits
from activator.fleet.image_builder import ImageJobs
from activator.fleet.in_place import Updates
from activator.fleet.load_calls import LoadCalls
from activator.fleet.load_state import LoadStates
from activator.fleet.reload import Reloader, RepositorySync
from activator.fleet.replica_config import ReplicaConfigs
from activator.fleet.replica_updates import update_replicas
from activator.fleet.repository import ModelEntry, Repository
from activator.fleet.sharing import (
    models_per_shared_replica,
    running_share,
    share_models,
    shared_report,
)
from activator.observe.cost import CostFigures, CostLedger
from activator.observe.history import History, HistorySlice, Sample
from activator.observe.metrics import Metrics
from activator.observe.metrics_text import render
from activator.observe.status_document import (
    ColdStartReport,
    CostReport,
    ImageState,
    ModelState,
    ModelStatus,
    StatusDocument,
)
from activator.scaler.backend import (
    AsyncLifecycle,
    LoadParameters,
    ScalerBackend,
    SharedLoadState,
    SharedPlacement,
)
from activator.scaler.factory import open_backend
from activator.scaler.kube_config import KubernetesConfig
from thawwire.load_overrides import LoadOverride
from tritonconfig import sequence_idle_us
from tritonconfig.fingerprint import Fingerprint

__all__ = ["RECENT_COLD_STARTS", "Fleet", "FleetModel"]

logger = logging.getLogger(__name__)

RECENT_COLD_STARTS = 20
"""Cold starts the status document lists (newest first, all models)."""

_CACHE_METRICS_EVERY_S = 15.0
_STARTING = (ModelState.WAKING, ModelState.WAITING_FOR_NODE)


@dataclass
class FleetModel:
    """One served model in the fleet: everything the fleet keeps of it, in one place."""

    entry: ModelEntry  # the repository's (config, settings, directory, ensemble steps)
    endpoint: ModelEndpoint
    ledger: CostLedger  # its GPU-seconds, used and saved (the status page's cost view)
    # Every model its ensemble's steps run, nested ensembles expanded (() for a model).
    composing: tuple[str, ...] = ()
    published: ModelState | None = None  # the state last set on `thaw_model_state`


class Fleet:
    """Owns one ModelEndpoint per repository model and ticks their autoscalers.

    `backend` runs the replicas: the one given (tests), else the one `config.scaler` names,
    whose replicas reach this `thaw up` at `bound` (where it listens).
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
        bound: BoundAddresses | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        repository_sync: RepositorySync | None = None,
    ) -> None:
        """`repository_sync`: the local copies of S3 repositories that `repository` was read
        from, synced before each load's and poll's re-read (activator.fleet.reload)."""
        self.config = config
        self.repository = repository
        # While `thaw up` wakes its `--load-model` models at start (activator.process.serving):
        # not ready then, with `--strict-readiness`.
        self.loading_at_start = False
        self.metrics = metrics
        self.session = session
        self._clock = clock
        self._wall = wall
        self.backend: ScalerBackend = backend or open_backend(config, session, metrics, bound)
        names = repository.names()
        entries = {name: repository.get(name) for name in names}
        now = clock()
        kubernetes = isinstance(config.scaler, KubernetesConfig)
        # Triton's "not loaded" in explicit mode (activator.fleet.load_state); on Kubernetes
        # only where the backend shares it between the fleet's activators (SharedLoadState).
        shared_states = self.backend if isinstance(self.backend, SharedLoadState) else None
        self.load_states = LoadStates(
            tracked=config.model_control and (not kubernetes or shared_states is not None),
            at_start=(*config.load_models, *config.loaded_at_zero),
        )
        self._shared_limits = SharedLimits(config.shared_replica_concurrency)
        # One record per served model, by name (the one per-model table of the fleet).
        self.models: dict[str, FleetModel] = {
            name: self._record(entry, entries, now) for name, entry in entries.items()
        }
        # A model loaded at start loads the models its ensemble's steps run, as Triton's
        # `--load-model` does (loaded, not by name: tritonconfig.unload_plan).
        at_start = [m for n, m in self.models.items() if self.load_states.loaded(n)]
        self.load_states.mark_loaded(*{step for model in at_start for step in model.composing})
        self._endpoints = {name: model.endpoint for name, model in self.models.items()}
        # The endpoints alone, read-only, kept up to date as models come and go
        # (activator.direct.front_door routes on it).
        self.endpoints: Mapping[str, ModelEndpoint] = MappingProxyType(self._endpoints)
        # Called with each model added after the start, and its endpoint (`add_model`).
        self._added_listeners: list[Callable[[str, ModelEndpoint], None]] = []
        self.history = History(
            names,
            capacity=config.history_samples,
            interval_s=config.history_interval_s,
        )
        metrics.report_cost(self.cost_figures)
        models = ((m.entry, m.endpoint) for m in self.models.values())
        share_models(models, self.backend, self._contended())
        if isinstance(self.backend, SharedPlacement):
            metrics.report_shared(self.backend.shared_status)
        for name in repository.unavailable:  # unavailable for the life of this `thaw up`
            self._publish_state(name, ModelState.UNAVAILABLE)
        self.images: ImageJobs | None = None
        if config.build_images and config.cache_dir is not None:
            # An ensemble has no files of its own: nothing to build or pull an image of.
            dirs = [m.entry.directory for m in self.models.values() if not m.entry.ensemble]
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
        # The repository read again after the start: `load`, and the poll.
        self.reloader = Reloader(
            self, rereads=not kubernetes, clock=clock, repository_sync=repository_sync
        )
        # Triton's repository load and unload calls, as they change the fleet.
        self._load_calls = LoadCalls(
            models=self.models,
            repository=repository,
            states=self.load_states,
            reloader=self.reloader,
            session=session,
            drain_timeout_s=config.drain_timeout_s,
            shared=shared_states,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._dropping: set[asyncio.Task[None]] = set()  # drains of dropped models, not waited
        self._images_task: asyncio.Task[None] | None = None
        metrics.watch_caches(config.cache_dir, config.host_cache_dir)

    def wake_composing(self, name: str) -> None:
        """An ensemble was asked: wake every model its steps will call, all at once (none
        with namespacing: its replica runs its steps, activator.fleet.repository)."""
        if self.repository.namespacing:
            return
        record = self.models.get(name)
        for model in record.composing if record is not None else ():
            self.models[model].endpoint.expect_request()

    def serving(self, name: str, version: str | None = None) -> ModelEntry:
        """The model a request for `name` (at `version`) goes to; else why not: the
        repository's error (UnknownModel, ModelUnavailable, AmbiguousModel), or, in explicit
        mode, the refusal of a model not loaded (activator.fleet.load_state)."""
        entry = self.repository.get(name)
        refusal = self.load_states.refusal(name)
        if refusal is not None:
            raise refusal
        return entry if version is None else self.repository.get(name, version)

    async def serving_now(self, name: str, version: str | None = None) -> ModelEntry:
        """`serving`, after learning the fleet's load state afresh when `name` is not loaded
        here (`refresh_load_state`): what a request that would wake the model asks."""
        if self._load_calls.stale(name):  # (a request's hot path: no await when loaded)
            await self._load_calls.refresh(name)
        return self.serving(name, version)

    async def refresh_load_state(self, *names: str) -> None:
        """Learn the fleet's shared load state now when this activator knows one of `names`
        as not loaded (Kubernetes: another activator may have answered its load since the
        last periodic read; activator.fleet.load_calls.LoadCalls.refresh)."""
        await self._load_calls.refresh(*names)

    async def load(
        self, name: str, override: LoadOverride | None = None, *, wait: bool = True
    ) -> None:
        """The repository load call: re-read `name` and warm it, then loaded, with its
        ensemble's steps (activator.fleet.load_calls; `wait`: the replicas it replaces
        stopped before the return)."""
        await self._load_calls.load(name, override, wait=wait)

    async def unload(
        self, name: str, *, wait: bool = True, unload_dependents: bool = False
    ) -> None:
        """The repository unload call: refused from now on (explicit mode), its replicas
        drained to zero, with the models that go with it (activator.fleet.load_calls;
        `wait`: before the return)."""
        await self._load_calls.unload(name, wait=wait, unload_dependents=unload_dependents)

    def endpoint(self, name: str) -> ModelEndpoint:
        """The served model's endpoint; else the repository's error for `name` (UnknownModel,
        or ModelUnavailable with its reason)."""
        model = self.models.get(name)
        if model is None:
            self.repository.get(name)  # raises: every model it serves has a record
            raise UnknownModel(f"unknown model: '{name}'")
        return model.endpoint

    async def start(self) -> None:
        """Adopt replicas that already run; start ticking; bring min_replicas up (of the
        loaded models, in explicit mode); kick off background image builds."""
        if isinstance(self.backend, AsyncLifecycle):
            await self.backend.start()
        await asyncio.gather(*(e.adopt_running() for e in self.endpoints.values()))
        self._tasks.append(asyncio.create_task(self._tick_loop()))
        self._tasks.append(asyncio.create_task(self._cache_loop()))
        if self.config.repository_poll_s is not None:
            poll = self.reloader.poll_forever(self.config.repository_poll_s)
            self._tasks.append(asyncio.create_task(poll))
        self._build_images()
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
        sharing = models_per_shared_replica(self.backend)
        for name, model in self.models.items():
            endpoint = model.endpoint
            running = running_share(endpoint, sharing)
            model.ledger.observe(now, running=running, ready=endpoint.ready_count)
            if model.published != endpoint.state:
                self._publish_state(name, endpoint.state)
                model.published = endpoint.state
        wall = self._wall()
        if not self.history.due(wall):
            return
        samples = {
            name: Sample(
                ready=m.endpoint.ready_count,
                running=m.endpoint.running_count,
                held=m.endpoint.held_count,
                in_flight=sum(r.in_flight for r in m.endpoint.replicas),
                replica_seconds=m.ledger.figures(now).replica_seconds,
            )
            for name, m in self.models.items()
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

    def _build_images(self) -> None:
        """Run the image jobs queued (at start, or since a model was added or changed),
        unless they run already."""
        if self.images is None:
            return
        if self._images_task is None or self._images_task.done():
            if self._images_task is not None:
                self._tasks.remove(self._images_task)
            self._images_task = asyncio.create_task(self._run_images(self.images))
            self._tasks.append(self._images_task)

    # ---- the repository changed (activator.fleet.reload) -----------------------------------

    def served(self, name: str) -> bool:
        """Whether `name` is a served model (not unavailable, not unknown)."""
        return name in self.models

    def on_model_added(self, listener: Callable[[str, ModelEndpoint], None]) -> None:
        """Call `listener` with each model added after the start and its endpoint."""
        self._added_listeners.append(listener)

    def add_model(self, entry: ModelEntry, files: Fingerprint) -> ModelEndpoint:
        """Serve a model found after the start (`files`: its fingerprint), at zero."""
        name = entry.name
        self.repository.install(entry, files)
        entries = {**self._entries(), name: entry}
        record = self._record(entry, entries, self._clock())
        self.models[name] = record
        self._endpoints[name] = record.endpoint
        self._recompose(entries)
        self.history.add(name)
        self._share_again(name)
        self._image_of(entry)
        for listener in self._added_listeners:
            listener(name, record.endpoint)
        logger.info("model=%s added: versions %s, at zero", name, ", ".join(entry.versions))
        return record.endpoint

    def renew_model(self, entry: ModelEntry, files: Fingerprint) -> ModelEndpoint:
        """A served model's files changed: serve `entry` from now on. Its replicas run the
        old files until the caller replaces them; its `thaw.*` scaling settings stay those
        it started with."""
        name = entry.name
        record = self.models[name]
        if entry.settings != record.entry.settings:
            logger.warning("model=%s changed `thaw.*` settings take effect at the next start "
                           "of thaw up", name)  # fmt: skip
            # The entry says what is in effect: the endpoint's settings, fixed at its making.
            entry = dataclasses.replace(entry, settings=record.entry.settings)
        self.repository.install(entry, files)
        record.entry = entry
        self._recompose(self._entries())
        self.replica_configs.forget(name)
        self._share_again(name)  # its new weights' size, its rate-limiter resources
        self._image_of(entry)
        logger.info("model=%s changed: versions %s", name, ", ".join(entry.versions))
        return record.endpoint

    def load_parameters(self, name: str, parameters: Mapping[str, str] | None) -> None:
        """The parameters of `name`'s replicas' load call from now on (a load's override;
        the reloader refuses overrides on a backend that cannot take them)."""
        if isinstance(self.backend, LoadParameters):
            self.backend.set_load_parameters(name, parameters)

    async def update_replicas(
        self, name: str, parameters: Mapping[str, str] | None = None
    ) -> Updates:
        """Send `name`'s load to each of its routable replicas, for an instance update in
        place; their answers (activator.fleet.replica_updates)."""
        return await update_replicas(self.session, self.models[name].endpoint, name, parameters)

    async def drop_model(self, name: str, *, wait: bool = True) -> None:
        """A model whose directory is gone: out of the index and routes now, then its
        replicas drained (requests in flight finish) and its held requests failed; without
        `wait` that drain runs on after the return (a call a replica of the model carried)."""
        record = self.models.pop(name, None)
        self._endpoints.pop(name, None)
        self.repository.remove(name)
        self._recompose(self._entries())
        for state in ModelState:  # no `thaw_model_state` series for a model that is gone
            with contextlib.suppress(KeyError):
                self.metrics.model_state.remove(name, state.value)
        if record is None:
            return
        logger.info("model=%s removed from the repository: draining", name)
        drain = self._drain_dropped(record.endpoint)
        if wait:
            await drain
            return
        task = asyncio.create_task(drain)
        self._dropping.add(task)
        task.add_done_callback(self._dropping.discard)

    @staticmethod
    async def _drain_dropped(endpoint: ModelEndpoint) -> None:
        await endpoint.scale_to_zero()
        await endpoint.close()

    def _entries(self) -> dict[str, ModelEntry]:
        return {m.entry.name: m.entry for m in self.models.values()}

    def _contended(self) -> dict[str, frozenset[str]]:
        """The models sharing replicas for their rate-limiter resources (rate_limits)."""
        return rate_limits.sharing(self.config.scaler, self._entries())

    def rate_limit_problem(self, entry: ModelEntry) -> str | None:
        """Triton's refusal of a load of `entry` (added or changed after the start) beside
        the other loaded models for its rate-limiter resources (rate_limits); in explicit
        mode a model not loaded, or unloaded, claims nothing, as in Triton."""
        loaded = {n: e for n, e in self._entries().items() if self.load_states.loaded(n)}
        return rate_limits.load_problem(self.config.scaler, entry, loaded)

    def _share_again(self, name: str) -> None:
        """Register `name` with the backend after its files were added or changed, and the
        models whose rate-limiter resources it now names in common (their peers changed)."""
        contended = self._contended()
        names = {name, *contended}
        models = [(self.models[n].entry, self.models[n].endpoint) for n in sorted(names)]
        share_models(models, self.backend, contended)

    def _recompose(self, entries: Mapping[str, ModelEntry]) -> None:
        for name, model in self.models.items():
            model.composing = _composing(entries, name)

    def _image_of(self, entry: ModelEntry) -> None:
        if self.images is not None and not entry.ensemble:
            self.images.add(entry.directory)
            self._build_images()

    def _record(
        self, entry: ModelEntry, entries: Mapping[str, ModelEntry], now: float
    ) -> FleetModel:
        """A served model's record: its endpoint and cost ledger."""
        name = entry.name
        endpoint = ModelEndpoint(
            name,
            entry.settings,
            self.backend,
            self.metrics,
            drain_timeout_s=self.config.drain_timeout_s,
            stats=ModelStatistics(name, self.session, metrics=ModelMetrics(self.session)),
            clock=self._clock,
            sequence_idle_s=_sequence_idle_s(entry),
            shared_limits=self._shared_limits,
            loaded=functools.partial(self.load_states.loaded, name),
        )
        ledger = CostLedger(name, gpus_per_replica=entry.gpus_per_replica, now=now)
        return FleetModel(entry, endpoint, ledger, composing=_composing(entries, name))

    @property
    def image_states(self) -> dict[str, str]:
        """Each model's image state (activator.observe.status_document.ImageState); an
        ensemble's is always "no weights" (it has no files to image)."""
        if self.images is not None:
            states = dict(self.images.states)
        else:
            states = dict.fromkeys(self.models, ImageState.UNKNOWN.value)
        ensembles = [name for name, model in self.models.items() if model.entry.ensemble]
        states.update(dict.fromkeys(ensembles, ImageState.NO_WEIGHTS.value))
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

    async def step_down(self) -> None:
        """Shutdown has begun (no new connection is accepted): hand any scaling leadership
        over now, before the last clients' connections are served (connection_drain), so that
        another activator scales meanwhile. `close` does the rest."""
        if isinstance(self.backend, AsyncLifecycle):
            await self.backend.release()

    async def close(self) -> None:
        """Graceful stop: fail held requests, drain every replica, stop the pool."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if isinstance(self.backend, AsyncLifecycle):
            await self.backend.release()  # its replicas outlive this activator
        await self._load_calls.close()
        await asyncio.gather(*self._dropping, *(e.close() for e in self.endpoints.values()))
        await self.backend.close()
        await asyncio.to_thread(self.reloader.close)

    async def replica_metrics(self) -> str:
        """Every model's replicas' series (activator.endpoint.replica_metrics), as exposition
        text; a loaded model at zero has Triton's counters at 0, one not loaded none."""
        pages = await asyncio.gather(*(e.metric_families() for e in self.endpoints.values()))
        served = {
            name: self.repository.get(name).versions
            for name in self.endpoints
            if self.load_states.loaded(name)
        }
        families = with_zeros(merge_families(pages), served, self.config.metrics_settings)
        # An ensemble has no queue of its own (Triton's pending count reads 0 for it).
        held = {
            name: e.held
            for name, e in self.endpoints.items()
            if name in served and e.held and not self.repository.get(name).ensemble
        }
        return render(with_held(families, held, served).values())

    def _publish_state(self, model: str, state: ModelState) -> None:
        for each in ModelState:
            self.metrics.model_state.labels(model, each.value).set(1 if each is state else 0)

    def cost_figures(self) -> list[CostFigures]:
        """Every served model's cost accounting up to now (by name)."""
        now = self._clock()
        return [self.models[name].ledger.figures(now) for name in sorted(self.models)]

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
        if self.load_states.tracked:
            models = [
                dataclasses.replace(m, load_state=str(self.load_states.state(m.model)))
                for m in models
            ]
        for name, reason in self.repository.unavailable.items():
            models.append(ModelStatus.unavailable(name, reason))
        return StatusDocument(
            models=tuple(sorted(models, key=lambda m: m.model)),
            warm_pool=self.backend.pool_status(),
            image_builds=self.image_states,
            cold_starts=self.cold_starts(),
            cost=CostReport(self.config.gpu_hour_price, tuple(self.cost_figures())),
            shared=shared_report(self.backend),
        )


def _sequence_idle_s(entry: ModelEntry) -> float | None:
    idle_us = sequence_idle_us(entry.config)
    return idle_us / 1e6 if idle_us is not None else None


def _composing(entries: Mapping[str, ModelEntry], name: str) -> tuple[str, ...]:
    """The models an ensemble's steps run, nested ensembles expanded (() for a model); only
    served ones (`entries`)."""
    found: dict[str, None] = {}
    pending = list(entries[name].steps)
    while pending:
        model = pending.pop(0)
        if model in found or model == name or model not in entries:
            continue
        found[model] = None
        pending += entries[model].steps
    return tuple(found)
