"""Bring a model's versions up in a thread: device plan, restore, backend instances, scheduler.

plan devices (device_plan: which device each instance runs on; fallbacks logged + counted)
  ─▶ restore once per distinct device (snapshot_restore)
  ─▶ one backend instance per placement, given its device's image
  ─▶ the version's Scheduler
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime.backends.base import Backend, LoadContext, SnapshotImage
from runtime.backends.registry import backend_class
from runtime.devices.errors import is_device_oom
from runtime.devices.inventory import DeviceInventory, LocalInventory
from runtime.devices.plan import (
    Capabilities,
    DevicePlan,
    DevicePlanError,
    Placement,
    needs_gpu,
    plan_devices,
)
from runtime.devices.vram_budget import check_framework_vram, check_load_limits, framework_vram
from runtime.errors import DeviceOutOfMemory, RepositoryError, ServingError
from runtime.model_config import config_to_json, fill_defaults, validate_config
from runtime.models.answer_order import has_decoupled_step
from runtime.models.instance_identity import instance_keys, match_instances
from runtime.models.output_labels import ensemble_output_labels, read_output_labels
from runtime.models.repository import ModelSpec
from runtime.models.signature import ModelSignature
from runtime.models.snapshot_restore import ImageSource, SnapshotRestorer
from runtime.models.warmup import first_contact_sample, run_warmup, warmup_samples
from runtime.observe.metrics import Metrics
from runtime.observe.stats import ModelStats, StatsBook
from runtime.observe.tracing import RequestTracer
from runtime.scheduling.batch_planner import DynamicBatching
from runtime.scheduling.ensemble_batching import ConfigOf
from runtime.scheduling.ensemble_scheduler import EnsembleScheduler, StepRunner
from runtime.scheduling.model_scheduler import ModelScheduler
from runtime.scheduling.queue_policy import QueuePolicies
from runtime.scheduling.rate_limit import ResourceKey, instance_needs
from runtime.scheduling.resource_gate import ResourceGate
from runtime.scheduling.scheduler import Scheduler
from runtime.scheduling.sequence_scheduler import SequenceScheduler
from tritonconfig import is_ensemble
from tritonconfig.schema import mc

if TYPE_CHECKING:
    from snapshotter import Arena

__all__ = ["InstanceChange", "LoadedVersion", "VersionLoader"]

logger = logging.getLogger(__name__)

# The backends whose instances Triton loads in parallel (they declare it to Triton's core).
_PARALLEL_LOAD_BACKENDS = frozenset({"python", "onnxruntime"})


@dataclass
class LoadedVersion:
    """One version that is up: its config, signature, instances and scheduler."""

    version: str
    config: mc.ModelConfig
    config_json: dict[str, Any]
    signature: ModelSignature
    scheduler: ModelScheduler
    instances: list[Backend]
    restored: bool
    stats: ModelStats
    warmup_s: float = 0.0  # the config's `model_warmup` samples, run at load
    # Each instance's identity (instance_identity.instance_keys), in `instances`' order: an
    # instance update keeps the instances whose identity the new config still has.
    instance_keys: list[str] = field(default_factory=list)


@dataclass
class InstanceChange:
    """An instance update of one version up (VersionLoader.update_instances), ready to apply:
    `add` is loaded, `remove` still serves until the scheduler retires it."""

    version: LoadedVersion
    config: mc.ModelConfig  # the new config, instance groups and all
    add: list[Backend]
    remove: list[Backend]
    keys: list[str]  # the instance keys once applied: the kept ones in order, then `add`'s
    add_needs: list[dict[ResourceKey, int]] = field(default_factory=list)  # `add`'s resources


class VersionLoader:
    """Loads and unloads model versions; every method blocks and belongs in a worker thread."""

    def __init__(
        self,
        *,
        book: StatsBook,
        metrics: Metrics,
        image_loader: ImageSource | None,
        arena: Arena | None,
        inline_exec_max_us: int = 0,
        auto_complete: bool = True,
        steps: StepRunner | None = None,
        config_of: ConfigOf | None = None,
        inventory: DeviceInventory | None = None,
        vram_headroom_bytes: int = 512 << 20,
        gpu_limits: tuple[tuple[int, float], ...] = (),
        tracer: RequestTracer | None = None,
        gate: ResourceGate | None = None,
        load_retries: int = 0,
    ) -> None:
        """`gate`: where instances hold their rate-limiter resources while they execute
        (`--rate-limit=execution_count`); None: nothing is held. `load_retries`
        (`--model-load-retry-count`): a version whose load fails is tried that many more
        times, as Triton tries its model creation again; the last failure is the load's."""
        self._gate = gate
        self._load_retries = load_retries
        self._book = book
        self._tracer = tracer  # the trace extension's records (runtime.observe.tracing)
        self._vram_headroom = vram_headroom_bytes  # beside the frameworks' own weight copies
        self._gpu_limits = dict(gpu_limits)  # `--model-load-gpu-limit`: GPU -> used fraction
        self._auto_complete = auto_complete  # False: no model.py `auto_complete_config`
        self._steps = steps  # where ensembles run their steps
        self._config_of = config_of  # the composing models' configs, for ensembles
        self._inventory = inventory or LocalInventory()
        self._metrics = metrics
        self._restorer = (
            SnapshotRestorer(image_loader, arena=arena, metrics=metrics)
            if image_loader is not None
            else None
        )
        self._inline_exec_max_us = inline_exec_max_us

    def load(
        self,
        spec: ModelSpec,
        keep: Mapping[str, LoadedVersion] | None = None,
        *,
        steps: StepRunner | None = None,
    ) -> dict[str, LoadedVersion]:
        """Every version the policy selects; all or nothing (a failure unloads the rest).
        `keep`: versions already up that a reload keeps as they are (version_reuse).
        `steps`: where this ensemble's steps run, if not where every ensemble's do."""
        config = self._complete(spec)
        kept = keep or {}
        loaded: dict[str, LoadedVersion] = {}
        try:
            for version in spec.versions:
                if str(version) in kept:
                    loaded[str(version)] = kept[str(version)]
                    logger.info("model=%s version=%s unchanged: kept", spec.name, version)
                    continue
                loaded[str(version)] = self._load_version_tries(spec, config, version, steps)
        except BaseException:
            self.unload(spec.name, {v: up for v, up in loaded.items() if v not in kept})
            raise
        return loaded

    def unload(self, name: str, versions: dict[str, LoadedVersion]) -> None:
        """Drain each version's queue, stop its workers, finalize its instances."""
        for version in versions.values():
            version.scheduler.join()
            for instance in version.instances:
                try:
                    instance.unload()
                except Exception as exc:
                    logger.warning("model=%s unload raised %r", name, exc)
            if self._book.close(name, version.version, version.stats):
                self._metrics.forget(name, version.version)  # not a reload's new gauges

    def update_instances(self, spec: ModelSpec, up: LoadedVersion) -> InstanceChange:
        """Triton's instance update of version `up`, whose files and config but for its
        instance groups are unchanged: load only the instances the new groups add (an instance
        keeps its identity, instance_identity.py, whatever its group's name or position); the
        instances the groups drop are named in the change, still serving."""
        config = self._complete(spec)
        version = int(up.version)
        plan = self._plan(spec.name, config)
        match = match_instances(up.instance_keys, instance_keys(config, plan.placements))
        new = DevicePlan(tuple(plan.placements[i] for i in match.added))
        images = (
            self._restorer.restore(spec, version, new.restore_devices)
            if self._restorer is not None and new.placements
            else {}
        )
        added = self._instances(spec, config, version, new, images) if new.placements else []
        samples = warmup_samples(config, spec.model_dir)
        if samples and added:
            try:
                run_warmup(spec.name, added, samples)
            except BaseException:
                self.discard(spec.name, added)
                raise
        logger.info(
            "model=%s version=%s instance update: %d kept, %d added, %d removed",
            spec.name, up.version, len(match.kept), len(added), len(match.removed),
        )  # fmt: skip
        return InstanceChange(
            version=up,
            config=config,
            add=added,
            remove=[up.instances[i] for i in match.removed],
            keys=[up.instance_keys[i] for i in match.kept]
            + [match.new_keys[i] for i in match.added],
            add_needs=_needs(config, new.placements),
        )

    def discard(self, name: str, instances: list[Backend]) -> None:
        """Finalize instances no scheduler runs (any more): an update's retired or unused ones."""
        for instance in instances:
            try:
                instance.unload()
            except Exception as exc:
                logger.warning("model=%s unload raised %r", name, exc)

    def _complete(self, spec: ModelSpec) -> mc.ModelConfig:
        config = spec.config
        if config.backend != "python" or not self._auto_complete:
            return config
        from runtime.python.backend import auto_complete_config

        config = auto_complete_config(
            config, spec.model_file(spec.versions[-1]), model_dir=spec.model_dir
        )
        config.name = spec.name
        config.backend = "python"
        fill_defaults(config, gpu_available=False)
        validate_config(config, f"{spec.model_dir}/config.pbtxt (after auto_complete_config)")
        return config

    def _load_version_tries(
        self, spec: ModelSpec, config: mc.ModelConfig, version: int, steps: StepRunner | None
    ) -> LoadedVersion:
        """`_load_version`, tried again after a failure up to `load_retries` times."""
        for attempt in range(self._load_retries + 1):
            try:
                return self._load_version(spec, config, version, steps)
            except Exception as exc:
                if attempt == self._load_retries:
                    raise
                logger.warning(
                    "model=%s version=%s load failed (%s): trying again (%d of %d)",
                    spec.name, version, exc, attempt + 1, self._load_retries,
                )  # fmt: skip
        raise AssertionError("unreachable")

    def _load_version(
        self, spec: ModelSpec, config: mc.ModelConfig, version: int, steps: StepRunner | None
    ) -> LoadedVersion:
        if is_ensemble(config):
            return self._load_ensemble(spec, config, version, steps or self._steps)
        started = time.perf_counter()
        samples = warmup_samples(config, spec.model_dir)  # a bad sample fails before loading
        labels = read_output_labels(config, spec.model_dir)  # as does a missing label file
        plan = self._plan(spec.name, config)
        if plan.placements and all(p.passive for p in plan.placements):
            raise RepositoryError(
                f"model '{spec.name}' version {version}: every instance group is passive "
                "(`passive: true`): no instance would take its requests"
            )
        images = (
            self._restorer.restore(spec, version, plan.restore_devices)
            if self._restorer is not None
            else {}
        )
        restored_at = time.perf_counter()
        self._check_vram(spec, config, version, plan, images)
        instances = self._instances(spec, config, version, plan, images)
        try:
            warmup_s = run_warmup(spec.name, instances, samples) if samples else 0.0
        except BaseException:
            for instance in instances:
                instance.unload()
            raise
        if not samples:
            self._first_contact(spec.name, config, plan, instances)
        if samples:
            self._metrics.record_warmup(spec.name, str(version), warmup_s)
        logger.debug(
            "model=%s version=%s restore+digest %.3f s, instances %.3f s",
            spec.name, version, restored_at - started, time.perf_counter() - restored_at,
        )  # fmt: skip
        # Restored only if the backend really built the model from the image's weights.
        restored = bool(images) and all(instance.used_image for instance in instances)
        stats = self._book.open(spec.name, str(version))
        signature = ModelSignature.from_config(config, labels=labels)
        # A passive instance is loaded (and warmed up) but the scheduler never gives it work.
        active = [i for i, p in enumerate(plan.placements) if not p.passive]
        needs = _needs(config, plan.placements)
        scheduler = self._scheduler(
            spec.name, str(version), config, signature, [instances[i] for i in active], stats,
            [needs[i] for i in active],
        )  # fmt: skip
        seconds = time.perf_counter() - started
        # Where the weights came from (host tier, node cache, store): the first device's image.
        source = next(iter(images.values())).source if restored else "files"
        self._metrics.record_load(
            spec.name, str(version), seconds, restored=restored, source=source
        )
        logger.info(
            "model=%s version=%s loaded in %.3f s (%d instance(s), restored=%s)",
            spec.name, version, seconds, len(instances), restored,
        )  # fmt: skip
        return LoadedVersion(
            version=str(version),
            config=config,
            config_json=config_to_json(config),
            signature=signature,
            scheduler=scheduler,
            instances=instances,
            restored=restored,
            stats=stats,
            warmup_s=warmup_s,
            instance_keys=instance_keys(config, plan.placements),
        )

    def _load_ensemble(
        self, spec: ModelSpec, config: mc.ModelConfig, version: int, steps: StepRunner | None
    ) -> LoadedVersion:
        """An ensemble has no instances: its scheduler runs the steps on other models."""
        if steps is None:
            raise RepositoryError(f"model '{spec.name}': this server cannot run ensembles")
        decoupled = has_decoupled_step(config, self._config_of or (lambda _name: None))
        if decoupled != config.model_transaction_policy.decoupled:
            # Triton's core sets it from the steps, whatever the config says.
            config = _copy(config)
            config.model_transaction_policy.decoupled = decoupled
        stats = self._book.open(spec.name, str(version))
        scheduler = EnsembleScheduler(
            spec.name, str(version), config, steps, stats, config_of=self._config_of
        )
        self._metrics.record_load(spec.name, str(version), 0.0, restored=False)
        logger.info("model=%s version=%s ensemble of %d steps loaded", spec.name, version,
                    len(config.ensemble_scheduling.step))  # fmt: skip
        return LoadedVersion(
            version=str(version),
            config=config,
            config_json=config_to_json(config),
            signature=ModelSignature.from_config(
                config,
                labels=ensemble_output_labels(
                    config, spec.model_dir, self._config_of or (lambda _name: None)
                ),
            ),
            scheduler=scheduler,
            instances=[],
            restored=False,
            stats=stats,
        )

    def _scheduler(
        self,
        name: str,
        version: str,
        config: mc.ModelConfig,
        signature: ModelSignature,
        instances: list[Backend],
        stats: ModelStats,
        needs: list[dict[ResourceKey, int]],
    ) -> ModelScheduler:
        """The scheduler the config asks for: Triton's sequence batcher, its dynamic batcher,
        or one request at a time (which may run inline, on the event loop, once proven tiny).
        `needs`: each instance's rate-limiter resources, held while it executes (with
        `--rate-limit=execution_count`; the sequence batcher does not hold them)."""
        trace = self._tracer.version(name, version) if self._tracer is not None else None
        if config.HasField("sequence_batching"):
            return SequenceScheduler(name, version, instances, stats, config, trace=trace)
        if config.HasField("dynamic_batching"):
            return Scheduler(
                name,
                version,
                instances,
                stats,
                policy=DynamicBatching.from_config(config),
                queue=QueuePolicies.from_config(config.dynamic_batching),
                batch_key=signature.batch_key,
                trace=trace,
                gate=self._gate,
                needs=needs,
            )
        return Scheduler(
            name, version, instances, stats, inline_max_us=self._inline_exec_max_us, trace=trace,
            gate=self._gate, needs=needs,
        )  # fmt: skip

    def _plan(self, name: str, config: mc.ModelConfig) -> DevicePlan:
        """Where each instance runs; every fallback is logged and counted once per load."""
        caps = (
            self._inventory.capabilities(
                onnxruntime=config.backend == "onnxruntime", tensorrt=config.backend == "tensorrt"
            )
            if needs_gpu(config) and config.backend != "python"  # python stubs place themselves
            else Capabilities()
        )
        try:
            plan = plan_devices(config, caps)
        except DevicePlanError as exc:
            raise RepositoryError(f"failed to load model '{name}': {exc}") from exc
        for fallback in plan.fallbacks:
            logger.warning("model=%s %s", name, fallback.message)
            self._metrics.record_device_fallback(name, fallback.reason.value)
        return plan

    def _check_vram(
        self,
        spec: ModelSpec,
        config: mc.ModelConfig,
        version: int,
        plan: DevicePlan,
        images: dict[str, SnapshotImage],
    ) -> None:
        """No GPU instance goes to a GPU over its `--model-load-gpu-limit`, and the frameworks'
        own weight copies fit on their GPUs (runtime.devices.vram_budget)."""
        gpus = [p.device_id for p in plan.placements if p.kind == "KIND_GPU"]
        if gpus and self._gpu_limits:
            check_load_limits(spec.name, gpus, self._gpu_limits, _nvml_reader)
        if config.backend == "python" or not gpus:
            return
        host = images.get("cpu")
        weights = host.manifest.weight_bytes if host is not None else 0
        weights = weights or _files_bytes(spec.version_dir(version))
        needs = framework_vram(plan, weights, frozenset(d for d in images if d != "cpu"))
        try:
            check_framework_vram(spec.name, needs, _nvml_reader, headroom_bytes=self._vram_headroom)
        except DeviceOutOfMemory:
            for gpu in needs:
                self._metrics.record_device_oom(spec.name, f"cuda:{gpu}")
            raise

    def _first_contact(
        self, name: str, config: mc.ModelConfig, plan: DevicePlan, instances: list[Backend]
    ) -> None:
        """One zero request on each GPU instance before the version reports ready (cuDNN and
        cuBLAS handles, the framework's arena, algorithm choices: model_warmup.py). A failure
        is logged, not fatal: zeros are not every model's valid input."""
        gpu = [i for i, p in zip(instances, plan.placements, strict=True) if p.kind == "KIND_GPU"]
        sample = first_contact_sample(config) if gpu and config.backend != "python" else None
        if sample is None:
            return
        try:
            seconds = run_warmup(name, gpu, [sample])
        except RepositoryError as exc:
            logger.warning("model=%s first GPU run at load failed (the first request will "
                           "pay for CUDA's first contact): %s", name, exc)  # fmt: skip
            return
        logger.info("model=%s first GPU run at load: %.3f s", name, seconds)

    def _instance_fallback(self, name: str, reason: str, message: str) -> None:
        """An instance that runs differently than planned and still serves: logged, counted."""
        logger.warning("model=%s %s", name, message)
        self._metrics.record_device_fallback(name, reason)

    def _instances(
        self,
        spec: ModelSpec,
        config: mc.ModelConfig,
        version: int,
        plan: DevicePlan,
        images: dict[str, SnapshotImage],
    ) -> list[Backend]:
        """One loaded backend per placement (instance of every instance group); all or none.
        Instances of the backends Triton loads in parallel (python, onnxruntime) load at once,
        each in its own thread: two instances whose initialize takes 10 s take 10 s."""
        contexts: list[LoadContext] = []
        shared: dict[str, Any] = {}  # one for all the version's instances (LoadContext.shared)
        for placement in plan.placements:
            contexts.append(
                LoadContext(
                    model_name=spec.name,
                    version=str(version),
                    version_dir=spec.version_dir(version),
                    model_dir=spec.model_dir,
                    config=config,
                    instance_kind=placement.kind,
                    device_id=placement.device_id,
                    image=images.get(placement.restore_device),
                    instance_name=f"{placement.group}_{placement.index}",
                    instance_count=len(plan.placements),
                    model_file=spec.model_file(version),
                    on_fallback=functools.partial(self._instance_fallback, spec.name),
                    shared=shared,
                )
            )
        # In placement order (schedulers and the first contact pair them with placements);
        # each thread fills its own slot.
        loaded: list[Backend | None] = [None] * len(contexts)

        def load(index: int) -> None:
            backend = backend_class(config.backend)()
            try:
                _load_instance(backend, contexts[index])
            except DeviceOutOfMemory:
                self._metrics.record_device_oom(spec.name, plan.placements[index].device)
                raise
            loaded[index] = backend

        try:
            if config.backend in _PARALLEL_LOAD_BACKENDS and len(contexts) > 1:
                with ThreadPoolExecutor(len(contexts), thread_name_prefix="thaw-load") as pool:
                    for future in [pool.submit(load, i) for i in range(len(contexts))]:
                        future.result()  # the first failure, once every load has ended
            else:
                for index in range(len(contexts)):
                    load(index)
        except BaseException:
            for instance in loaded:
                if instance is not None:
                    instance.unload()
            raise
        return [instance for instance in loaded if instance is not None]


def _needs(config: mc.ModelConfig, placements: Sequence[Placement]) -> list[dict[ResourceKey, int]]:
    """Each instance's rate-limiter resources, on its device (runtime.scheduling.rate_limit)."""
    return instance_needs(config, [(p.group, p.device_id) for p in placements])


def _load_instance(backend: Backend, ctx: LoadContext) -> None:
    """Load one instance; framework exceptions become errors that name the model."""
    try:
        backend.load(ctx)
    except ServingError:
        raise
    except MemoryError as exc:
        raise ServingError(f"model '{ctx.model_name}' ran out of memory while loading") from exc
    except Exception as exc:
        if ctx.instance_kind == "KIND_GPU" and is_device_oom(exc):
            raise DeviceOutOfMemory(
                f"model '{ctx.model_name}' version {ctx.version}: cuda:{ctx.device_id} ran out "
                f"of memory while loading instance {ctx.instance_name}"
            ) from exc
        raise RepositoryError(
            f"failed to load model '{ctx.model_name}' version {ctx.version}: {exc!r}"
        ) from exc
    except BaseException as exc:  # a model file's sys.exit() must not stop the server
        raise RepositoryError(
            f"failed to load model '{ctx.model_name}' version {ctx.version}: {exc!r}"
        ) from exc


def _nvml_reader(gpu: int) -> object:
    """GPU `gpu`'s memory as the driver reports it (snapshotter.nvml_memory), or None."""
    from snapshotter import nvml_memory

    return nvml_memory(gpu)


def _files_bytes(version_dir: Path) -> int:
    """Bytes of a version's files (the weights a framework will copy, near enough)."""
    try:
        return sum(p.stat().st_size for p in version_dir.rglob("*") if p.is_file())
    except OSError:
        return 0


def _copy(config: mc.ModelConfig) -> mc.ModelConfig:
    copied = mc.ModelConfig()
    copied.CopyFrom(config)
    return copied
