"""The ModelManager service: model states, control modes, load/unload, and infer.

What it serves by reading its models (index, metadata, config, statistics) is its base class's,
runtime.models.views.ModelViews.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime.config import ModelControlMode, ServeConfig
from runtime.devices.inventory import DeviceInventory, LocalInventory
from runtime.devices.target import DeviceTarget, local_target
from runtime.direct.front_door import FrontDoor
from runtime.errors import (
    ControlDisabled,
    FeatureDisabled,
    InvalidInput,
    ModelNotFound,
    RepositoryError,
    ServingError,
)
from runtime.inference import InferRequest, InferResponse
from runtime.models.image_cache import make_image_loader
from runtime.models.load_errors import name_load_failure
from runtime.models.model_entry import ModelState
from runtime.models.model_loading import ModelLoading
from runtime.models.namespaces import ModelKey, Namespaces
from runtime.models.repository_sync import RepositorySync, sync_repositories
from runtime.models.response_cache import ResponseCache
from runtime.models.snapshot_restore import ImageSource
from runtime.models.version_loader import VersionLoader
from runtime.models.views import ModelViews
from runtime.observe.metrics import Metrics
from runtime.observe.stats import StatsBook
from runtime.observe.tracing import RequestTracer
from runtime.python.server_host import PythonModelsHost
from runtime.python.spare_stubs import SpareStubs
from runtime.scheduling.ensemble_scheduler import EnsembleScheduler, StepRunner
from runtime.scheduling.rate_limit import ExplicitResource, RateLimitMode, ResourceLimits
from runtime.scheduling.request_parameters import scheduling_parameters
from runtime.scheduling.resource_gate import ResourceGate
from runtime.scheduling.response_stream import ResponseStream
from thawwire.load_overrides import refused
from thawwire.model_control import CONTROL_DISABLED, not_in_repository, unload_not_in_repository
from thawwire.names import is_model_name
from tritonconfig import back_with_steps, composing_models, unload_plan

if TYPE_CHECKING:
    from snapshotter import Arena, StagingPool

__all__ = ["ModelManager", "ModelState"]

logger = logging.getLogger(__name__)

# Triton's words for a repository registration outside explicit mode (UNSUPPORTED).
REGISTRATION_DISABLED = (
    "repository registration is not allowed if model control mode is not EXPLICIT"
)
# Triton's answer to /infer for a decoupled model (2.51, UNSUPPORTED: HTTP 501).
DECOUPLED_INFER = "HTTP end point doesn't support models with decoupled transaction policy"
# Its gRPC ModelInfer's (2.51, UNIMPLEMENTED): the same refusal, named for the RPC.
DECOUPLED_GRPC_INFER = "ModelInfer RPC doesn't support models with decoupled transaction policy"


class ModelManager(ModelViews):
    """Loads models per the control mode and serves infer (index, metadata, config and stats:
    ModelViews)."""

    def __init__(
        self,
        config: ServeConfig,
        *,
        metrics: Metrics,
        image_loader: ImageSource | None = None,
        arena: Arena | None = None,
        staging: StagingPool | None = None,
        inventory: DeviceInventory | None = None,
        device_target: DeviceTarget | None = None,
        front_door: FrontDoor | None = None,
        tracer: RequestTracer | None = None,
        repository_sync: RepositorySync | None = None,
        spare_stubs: SpareStubs | None = None,
    ) -> None:
        """`front_door`: the replica's client of `thaw up`'s front door (its owner closes
        it), where BLS calls to other models and, with its steps URL, ensemble steps go.
        `tracer`: where executed requests are sampled for trace records (the trace
        extension; runtime.observe.tracing). `repository_sync`: the local copies of remote
        (S3) repositories, synced before each index, load and poll
        (runtime.models.repository_sync); None: local repositories only. `spare_stubs`:
        Python stubs started ahead (`--python-spare-stubs`), offered to the first loads."""
        # What the reads (ModelViews) read: the repositories and which model a name means in
        # them (`--model-namespacing`), and every loaded version's statistics.
        super().__init__(
            config,
            namespaces=Namespaces(config.repositories, enabled=config.model_namespacing),
            book=StatsBook(summaries=config.metrics_settings.summary_latencies),
            repository_sync=repository_sync,
        )
        self._spares = spare_stubs
        # Where KIND_AUTO goes and which images are looked up (`--target`, resolved once).
        self._target = device_target or local_target(config.target, config.min_compute_capability)
        self._metrics = metrics
        metrics.bind(self._book, self.pending_counts)
        if image_loader is None and (config.store or config.cache):
            image_loader = make_image_loader(config, staging=staging, target=self._target)
        # Ensemble steps run here, on the composing models loaded beside the ensemble, or
        # (under `thaw up`) on the models behind the front door.
        self._front_door = front_door
        remote = front_door.steps if front_door is not None else None
        steps: StepRunner = remote if remote is not None else self
        self._cache = (
            ResponseCache(config.response_cache_bytes) if config.response_cache_bytes else None
        )
        # tritonserver's --rate-limit: the resource map, and with execution_count the gate
        # where each execution holds its instance's resources.
        limits = ResourceLimits(
            RateLimitMode(config.rate_limit),
            tuple(ExplicitResource(*r) for r in config.rate_limit_resources),
        )
        gate = ResourceGate(limits) if limits.mode is RateLimitMode.EXECUTION_COUNT else None
        self._loader = VersionLoader(
            gate=gate,
            book=self._book,
            metrics=metrics,
            image_loader=image_loader,
            arena=arena,
            inline_exec_max_us=config.inline_exec_max_us,
            auto_complete=config.auto_complete_config,
            steps=steps,
            config_of=self._config_of,
            inventory=inventory or LocalInventory(config.min_compute_capability),
            vram_headroom_bytes=config.vram_headroom_bytes,
            gpu_limits=config.model_load_gpu_limits,
            tracer=tracer,
            load_retries=config.model_load_retries,
        )
        self._tracer = tracer  # a stub's BLS call names its request's trace (ServerHost)
        self._loading = ModelLoading(
            config, namespaces=self._ns, models=self._models, loader=self._loader,
            metrics=metrics, target=self._target, cache=self._cache, step_runner=self,
            remote_steps=remote is not None, limits=limits, gate=gate,
            repository_sync=repository_sync,
        )  # fmt: skip
        self._started = False
        self._poller: asyncio.Task[None] | None = None
        self._python_host: PythonModelsHost | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def prepare(self) -> None:
        """Install this server's host of Python models (their stub processes, BLS, custom
        metrics), on the server's loop, before any model loads: before the frameworks'
        preload, so that a load call that comes while they import finds it. Idempotent."""
        if self._python_host is not None:
            return
        front_door = self._front_door
        self._python_host = PythonModelsHost.install(
            self,
            self._metrics.custom,
            front_door if front_door is not None and front_door.takes_bls else None,
            self._tracer,
            self._spares,
        )

    async def start(self) -> None:
        """Initial loads per control mode (failures are recorded, not raised); start polling."""
        self.prepare()  # before any model loads (done already when the app started it)
        mode = self._config.model_control_mode
        names = list(self._config.load_models)
        if mode != ModelControlMode.EXPLICIT or "*" in names:
            keys = await asyncio.to_thread(self._ns.scan)
        else:
            keys = [key for name in names for key in await self._loading.keys_to_load(name)]
        await asyncio.gather(*(self._loading.load_quietly(key) for key in keys))
        if keys:
            self._release_spares()
        for key in keys:  # loaded by name (`--load-model`, `*`, every model in the other modes)
            if key in self._models:
                self._models[key].named = True
        if mode == ModelControlMode.POLL:
            polls = self._loading.poll_forever()
            self._poller = asyncio.create_task(polls, name="repository-poller")
        self._started = True

    async def stop(self) -> None:
        """Stop polling, then unload every model (python models get `finalize()`)."""
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        await asyncio.gather(*(self._loading.unload(key) for key in list(self._models)))
        self._release_spares()
        self._started = False
        if self._python_host is not None:
            await self._python_host.uninstall()
            self._python_host = None

    def _release_spares(self) -> None:
        """Once a load is done, the stubs started ahead that it did not take end (a replica
        keeps no idle interpreter beside, say, an ONNX model)."""
        if self._spares is not None and not self._spares.released:
            self._spares.release()

    def is_ready(self) -> bool:
        """Started, and every model that should be loaded is READY (Triton's strict readiness)."""
        return self._started and all(
            m.state == ModelState.READY for m in self._models.values() if m.wanted
        )

    def register_collector(self, collector: Any) -> None:
        """Add a Prometheus collector to this server's /metrics (the native front's)."""
        self._metrics.registry.register(collector)

    def record_front_outcome(
        self, name: str, version: str, batch: int, request_ns: int, answered: bool
    ) -> None:
        """An execute of a request the native front sent to the stub itself that this server
        answers (the model's error response: answered; an execute that failed: not)."""
        for (model, loaded), stats in self._book.items():
            if (model, loaded) == (name, version):
                batch = max(batch, 1)
                stats.record_execution(batch, [(answered, batch, 0, request_ns)], (0, 0, 0))
                return

    # -- model repository extension -------------------------------------------------------

    async def load(
        self, name: str, *, config_json: str | None = None, files: dict[str, bytes] | None = None
    ) -> float:
        """Load (or reload) a model; returns when READY (with the seconds its warm-up samples
        took), raises the reason otherwise."""
        if self._config.model_control_mode != ModelControlMode.EXPLICIT:
            raise ControlDisabled(CONTROL_DISABLED)
        if not is_model_name(name):  # no such directory can exist: Triton's words for a typo
            raise ModelNotFound(not_in_repository(name))
        if files and config_json is None:
            raise InvalidInput("load with 'file:' parameters also needs the 'config' parameter")
        try:  # a remote repository is read again first, as Triton polls it on a load
            await sync_repositories(self._sync)
        except OSError as exc:
            raise RepositoryError(refused(name, str(exc))) from exc
        # With namespacing, in every namespace that has the name (as Triton applies a load).
        keys = await self._loading.keys_to_load(name)
        try:
            for key in keys:
                await self._loading.load(key, config_json=config_json, files=files, by_name=True)
        except ServingError as exc:
            name_load_failure(name, exc)
            raise
        finally:
            self._release_spares()
        for key in keys:  # as Triton's explicitly loaded: no unload of a dependent takes it
            self._models[key].named = True
        await self._bring_back()
        return sum(v.warmup_s for key in keys for v in self._models[key].versions.values())

    async def unload(self, name: str, *, unload_dependents: bool = False) -> None:
        """Unload every version (and the models going down with it: `_ensembles_running`);
        queued requests finish first, new ones get 503."""
        if self._config.model_control_mode != ModelControlMode.EXPLICIT:
            raise ControlDisabled(CONTROL_DISABLED)
        if not is_model_name(name):
            raise ModelNotFound(unload_not_in_repository(name))
        on_disk = await asyncio.to_thread(self._ns.keys_on_disk, name)
        keys = sorted({*on_disk, *(key for key in self._models if key.name == name)})
        if not keys:
            raise ModelNotFound(unload_not_in_repository(name))
        # As Triton 2.51: the ensembles that run it go down with it (and come back with it:
        # `_bring_back`); with `unload_dependents` also the models an ensemble unloaded runs
        # that no other ensemble runs and that were not loaded by name (tritonconfig.unload_plan).
        graph: dict[ModelKey, Collection[ModelKey]] = {
            key: model.down_with_steps
            for key, model in self._models.items()
            if model.down_with_steps is not None
        }
        graph.update(await self._ensembles_running())
        named = {key for key, model in self._models.items() if model.named}
        removed: set[ModelKey] = set(keys)
        down: set[ModelKey] = set()
        for key in keys:
            plan = unload_plan(key, graph, unload_dependents=unload_dependents, named=named)
            removed |= plan.removed
            down |= plan.down
        loaded = {key for key, model in self._models.items() if model.versions}
        down = (down - removed) & loaded
        # Ensembles first: their requests in flight finish before their steps' models go.
        for key in sorted(removed | down, key=lambda k: (k not in graph, k)):
            await self._loading.unload(key)
        for key in removed:  # out of the graph: loaded by name again, or as a step
            self._models[key].down_with_steps = None
            self._models[key].named = False
        for key in down:
            self._models[key].down_with_steps = frozenset(graph[key])

    # -- repositories registered at run time --------------------------------------------

    async def register_repository(self, root: Path, mapping: Mapping[str, str]) -> None:
        """Serve the models of `root` too (Triton's RegisterModelRepository, explicit mode
        only), `mapping` naming models by their subdirectories (a mapped model's name is its
        mapping's). RepositoryConflict when `root` is served already or a name is mapped
        already; RepositoryError when `root` is no directory. Loads nothing."""
        if self._config.model_control_mode != ModelControlMode.EXPLICIT:
            raise ControlDisabled(REGISTRATION_DISABLED)
        if not await asyncio.to_thread(root.is_dir):
            raise RepositoryError(f"failed to register '{root}', repository not found")
        self._ns.register(root, mapping)
        logger.info("Model repository registered: %s", root)  # Triton's words

    async def unregister_repository(self, root: Path) -> None:
        """Serve `root`'s models no more (Triton's UnregisterModelRepository; unload them
        first). Forgets the models of `root` that are not served (RepositoryError when `root`
        was not registered)."""
        if self._config.model_control_mode != ModelControlMode.EXPLICIT:
            raise ControlDisabled(REGISTRATION_DISABLED)
        if root not in self._repo.roots:
            raise RepositoryError(f"failed to unregister '{root}', repository not found")
        names = set(await asyncio.to_thread(self._repo.names_in, root))
        self._ns.unregister(root)
        namespace = str(root)
        for key, model in list(self._models.items()):
            if not model.live and (key.namespace == namespace or
                                   (not key.namespace and key.name in names)):  # fmt: skip
                del self._models[key]
        logger.info("Model repository unregistered: %s", root)  # Triton's words

    async def _bring_back(self) -> None:
        """Load again the ensembles an unload of a step took down whose steps are all loaded
        now, as Triton 2.51's load brings them back (tritonconfig.back_with_steps); one that
        fails to load stays down, with why in its index row."""
        down = {k: m.down_with_steps for k, m in self._models.items() if m.down_with_steps}
        if not down:
            return
        up = {key for key, model in self._models.items() if model.state == ModelState.READY}
        for key in back_with_steps(up, down):
            logger.info("model=%s loaded again: every model its steps run is loaded", key.name)
            with contextlib.suppress(ServingError):
                await self._loading.load(key, config_json=None, files=None)

    async def _ensembles_running(self) -> dict[ModelKey, set[ModelKey]]:
        """Each loaded ensemble and the loaded models its steps run (by their keys)."""
        loaded = {key: entry for key, entry in self._models.items() if entry.versions}
        ensembles = {
            key: composing_models(next(iter(entry.versions.values())).config)
            for key, entry in loaded.items()
        }

        def resolve() -> dict[ModelKey, set[ModelKey]]:  # step_key reads the disk
            runs: dict[ModelKey, set[ModelKey]] = {}
            for key, steps in ensembles.items():
                if steps:
                    runs[key] = set()
                for step in steps:
                    with contextlib.suppress(RepositoryError):  # not on disk: not loaded here
                        runs[key].add(self._ns.step_key(key, step))
            return runs

        runs = await asyncio.to_thread(resolve)
        return {key: {step for step in steps if step in loaded} for key, steps in runs.items()}

    # -- inference ------------------------------------------------------------------------

    async def infer(self, request: InferRequest, *, namespace: str | None = None) -> InferResponse:
        """Validate against the config, queue on the model's scheduler, return its response.
        `namespace`: that of the ensemble whose step this is (runtime.models.namespaces)."""
        received = time.perf_counter_ns()
        _, loaded = self._serving(request.model_name, request.model_version or None, namespace)
        if loaded.config.model_transaction_policy.decoupled:
            raise FeatureDisabled(DECOUPLED_INFER)
        # A request refused here never reached the model: like Triton (observed on 2.51) it
        # counts in neither the statistics nor `nv_inference_request_failure`.
        batch = loaded.signature.validate(request)
        params = scheduling_parameters(request.parameters)
        cache = self._cache if loaded.stats.cache_enabled else None
        if cache is not None:
            lookup = time.perf_counter_ns()
            held = [o.name for o in request.requested_outputs] or loaded.signature.outputs
            key = cache.key(request.model_name, loaded.version, request, held)
            hit = cache.get(key, request.model_name, loaded.version)
            looked = time.perf_counter_ns()
            if hit is not None:
                loaded.stats.record_cache_hit(looked - received, looked - lookup)
                return loaded.signature.finish(request, hit, batch)
        try:
            response = await loaded.scheduler.submit(
                request, batch_size=batch, received_ns=received, params=params
            )
        except ServingError:
            if cache is not None:  # a miss all the same, as Triton counts it; nothing to keep
                loaded.stats.record_cache_miss(looked - lookup)
            raise
        response.model_version = loaded.version
        if cache is not None:
            insert = time.perf_counter_ns()
            cache.put(key, response)
            loaded.stats.record_cache_miss(looked - lookup + time.perf_counter_ns() - insert)
        return loaded.signature.finish(request, response, batch)

    async def stream(
        self, request: InferRequest, *, namespace: str | None = None
    ) -> AsyncIterator[InferResponse]:
        """Every response to `request`: the one of a default model, or a decoupled model's
        zero or more, the last with `final` (a flag-only end has `flag_only`). An error
        response sent with the final flag, or a failed execute, raises its ServingError; one
        sent without it is a response with `error` set, and the stream goes on (as Triton's)."""
        received = time.perf_counter_ns()
        _, loaded = self._serving(request.model_name, request.model_version or None, namespace)
        if isinstance(loaded.scheduler, EnsembleScheduler) and not loaded.stats.cache_enabled:
            # Its steps are streamed: a decoupled step's responses each go on through the
            # steps after it, and out as a response of the ensemble (ensemble_flows).
            batch = loaded.signature.validate(request)
            params = scheduling_parameters(request.parameters)
            async for answer in loaded.scheduler.stream(
                request, batch_size=batch, received_ns=received, params=params
            ):
                if not answer.flag_only:
                    answer = loaded.signature.finish(request, answer, batch)
                yield answer
            return
        if not loaded.config.model_transaction_policy.decoupled:
            yield await self.infer(request, namespace=namespace)
            return
        batch = loaded.signature.validate(request)
        sink = ResponseStream()
        request.response_sink = sink
        params = scheduling_parameters(request.parameters)
        submitted = asyncio.ensure_future(
            loaded.scheduler.submit(request, batch_size=batch, received_ns=received, params=params)
        )
        # A request refused before its execute never reaches the model's sender: end it here.
        submitted.add_done_callback(lambda done: _end_if_failed(done, sink))
        try:
            async for item, final in sink.items():
                if isinstance(item, Exception):
                    if final:
                        raise item
                    yield InferResponse(
                        request.model_name, "", [], id=request.id, final=False, error=item
                    )
                    continue
                if item is None:
                    item = InferResponse(request.model_name, loaded.version, [], id=request.id)
                    item.flag_only = True
                else:
                    item.model_version = loaded.version
                    item = loaded.signature.finish(request, item, batch)
                item.final = final
                yield item
        finally:
            sink.close()

    async def poll_once(self) -> None:
        """Load new and changed models, unload removed ones (poll mode's one step)."""
        await self._loading.poll_once()


def _end_if_failed(submitted: asyncio.Future[InferResponse], sink: ResponseStream) -> None:
    """A decoupled request whose submit failed (queue closed, execute error): end its stream."""
    if submitted.cancelled():
        return
    exc = submitted.exception()
    if isinstance(exc, Exception):
        sink.send(exc, final=True)
