"""Loading a runtime's models: load, reload, unload and poll, each model under its own lock.

The ModelManager's half that changes model states; the manager keeps the reads and infer over
the same `ModelEntry` map, which this class fills.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from pathlib import Path

from runtime.backends.base import Backend
from runtime.config import ServeConfig
from runtime.devices.target import DeviceTarget
from runtime.errors import ModelNotFound, RepositoryError, ServingError
from runtime.models.cache_policy import decoupled_cache_error
from runtime.models.instance_update import (
    StaleUpdate,
    apply_updates,
    finish_update,
    prepare_update,
    updatable_versions,
)
from runtime.models.load_errors import failed_to_load
from runtime.models.load_files import write_load_files
from runtime.models.model_entry import UNLOADED, ModelEntry, ModelState
from runtime.models.namespaces import ModelKey, NamespacedRunner, Namespaces, ScopedSteps
from runtime.models.repository import (
    ModelSpec,
    Repositories,
    ensemble_cycle,
    fingerprint,
    read_model,
)
from runtime.models.repository_sync import RepositorySync, sync_repositories
from runtime.models.response_cache import ResponseCache
from runtime.models.version_loader import LoadedVersion, VersionLoader
from runtime.models.version_reuse import reusable_versions, same_but_versions
from runtime.observe.metrics import Metrics
from runtime.scheduling.instance_worker import Instance
from runtime.scheduling.rate_limit import ResourceLimits, requirements
from runtime.scheduling.resource_gate import ResourceGate
from thawserver.rate_limit_resources import group_devices
from thawwire.model_control import not_in_repository
from tritonconfig import composing_models, cycle_error, ensemble_steps, is_ensemble

__all__ = ["ModelLoading"]

logger = logging.getLogger(__name__)


class ModelLoading:
    """Loads, reloads and unloads the models of `models` (the manager's map, shared)."""

    def __init__(
        self,
        config: ServeConfig,
        *,
        namespaces: Namespaces,
        models: dict[ModelKey, ModelEntry],
        loader: VersionLoader,
        metrics: Metrics,
        target: DeviceTarget,
        cache: ResponseCache | None,
        step_runner: NamespacedRunner,
        remote_steps: bool,
        limits: ResourceLimits | None = None,
        gate: ResourceGate | None = None,
        repository_sync: RepositorySync | None = None,
    ) -> None:
        """`step_runner`: the manager, through which an ensemble's steps resolve in its own
        namespace (`--model-namespacing`); `remote_steps`: its steps run behind `thaw up`'s
        front door, so its composing models are not loaded here. `repository_sync`: remote
        repositories' local copies, synced before each poll (runtime.models.repository_sync)."""
        self._config = config
        self._sync = repository_sync
        self._ns = namespaces
        self._models = models
        self._loader = loader
        self._metrics = metrics
        self._target = target
        self._cache = cache
        self._step_runner = step_runner
        self._remote_steps = remote_steps
        # tritonserver's --model-load-thread-count: versions loaded at once.
        self._load_slots = asyncio.Semaphore(config.model_load_threads)
        # tritonserver's --rate-limit resources: every loaded model's needs, the explicit
        # limits; the gate where executions hold them (None: not held).
        self._limits = limits or ResourceLimits()
        self._gate = gate

    async def keys_to_load(self, name: str) -> list[ModelKey]:
        """The models a load of `name` loads: one per namespace holding it (without
        namespacing, or on no disk: `name` alone, whose load says what is wrong)."""
        found = await asyncio.to_thread(self._ns.keys_on_disk, name)
        return found or [self._ns.key(name)]

    async def load_quietly(self, key: ModelKey) -> None:
        with contextlib.suppress(ServingError):
            await self.load(key, config_json=None, files=None)

    async def load(
        self,
        key: ModelKey,
        *,
        config_json: str | None,
        files: dict[str, bytes] | None,
        if_needed: bool = False,
        by_name: bool = False,
    ) -> None:
        """Load `name`; `if_needed`: unless it is READY by the time its lock is ours (a
        composing model an ensemble needs, which another load may just have brought up).
        `by_name`: a load call named it; one whose files did not change since it was loaded
        loads every version again, as Triton's explicit load does (its `initialize` runs
        again, its statistics start over: a model that reads something outside its
        directory picks it up). A change keeps the versions it did not touch (version_reuse)."""
        name = key.name
        model = self._models.get(key)
        if model is None:
            # A name that is not in the repository (a typo) must leave no index entry and never
            # count for readiness, not even while the load is in flight: check before recording.
            if not files and not await asyncio.to_thread(_is_model_dir, self._ns, key):
                raise ModelNotFound(not_in_repository(name))
            model = self._models.setdefault(key, ModelEntry(name, key))
        async with model.lock:  # one load/unload of a model at a time
            if if_needed and model.state == ModelState.READY:
                model.wanted = True
                return
            if (
                model.override_dir is None
                and not files
                and not await asyncio.to_thread(_is_model_dir, self._ns, key)
            ):  # known, but its directory has gone since: refused as an unknown one is
                raise ModelNotFound(not_in_repository(name))
            model.wanted = True
            model.down_with_steps = None  # loaded again: by name, as a step, or brought back
            if await self._keeps_override(model, config_json=config_json, files=files):
                return
            previous_state = model.state
            model.state = ModelState.LOADING if not model.versions else model.state
            repo: Path | Repositories = self._ns.repository(key)
            override = None
            try:
                if files:
                    override = await asyncio.to_thread(write_load_files, name, files)
                    repo = override
                spec = await asyncio.to_thread(
                    read_model, repo, name, config_json=config_json,
                    gpu_available=bool(self._target.gpus), gpus=self._target.gpus,
                    auto_complete=self._config.auto_complete_config,
                    backend_directory=self._config.backend_directory,
                    config_name=self._config.model_config_name,
                    default_max_batch_size=self._config.default_max_batch_size,
                )  # fmt: skip
                model.fingerprint = spec.fingerprint
                if not model.versions:
                    model.known_versions = [str(v) for v in spec.versions]
                if is_ensemble(spec.config) and not self._remote_steps:
                    # Before taking a load slot: the composing loads take their own.
                    await self._load_composing(spec, key)
                if self._cache is not None:
                    await asyncio.to_thread(self._refuse_decoupled_cache, spec, key)
                needs = requirements(spec.config, group_devices(spec.config))
                self._limits.check(str(key), needs)
                again = by_name and config_json is None and not model.config_override
                whole = override is not None or (
                    again and model.served_fingerprint == spec.fingerprint
                )
                keep = {} if whole else _unchanged_versions(model, spec)
                updating = [] if whole else updatable_versions(model, spec)
                # With namespacing an ensemble's steps resolve in its namespace first.
                steps = ScopedSteps(self._step_runner, key.namespace) if key.namespace else None
                retired: list[tuple[list[Instance], list[Backend]]] = []
                async with self._load_slots:
                    if updating:
                        changes = await asyncio.to_thread(
                            prepare_update, self._loader, spec, updating
                        )
                        versions = dict(model.versions)
                        try:  # on the loop, at once: no request can slip in between
                            retired = apply_updates(changes)
                        except StaleUpdate as stale:
                            await asyncio.to_thread(self._loader.discard, name, stale.unused)
                            raise
                    else:
                        versions = await asyncio.to_thread(
                            self._loader.load, spec, keep, steps=steps
                        )
                for loaded in versions.values():
                    enabled = loaded.config.response_cache.enable
                    loaded.stats.cache_enabled = self._cache is not None and enabled
            except BaseException as exc:
                if override is not None:
                    shutil.rmtree(override, ignore_errors=True)
                self._limits.withdraw(str(key))  # a claim its check made, if it got there
                if isinstance(exc, ModelNotFound) and not model.versions:
                    # Removed from disk since the check above: leave no trace in the index.
                    model.wanted = False
                    if self._models.get(key) is model:
                        del self._models[key]
                    raise
                if override is None and await asyncio.to_thread(_is_model_dir, self._ns, key):
                    # Remember what failed, so polling retries only once the files change.
                    model.fingerprint = await asyncio.to_thread(_fingerprint, self._ns, key)
                self._load_failed(model, previous_state, exc)
                raise
            self._limits.update(str(key), needs)
            if self._gate is not None:
                self._gate.wake()  # a larger map may let a waiting execution start
            old, old_override = model.versions, model.override_dir
            model.retired_versions = (model.retired_versions | set(old)) - set(versions)
            model.versions, model.override_dir = versions, override
            model.config_override = config_json is not None and override is None
            model.served_fingerprint, model.served_config = spec.fingerprint, spec.config
            old = {v: up for v, up in old.items() if versions.get(v) is not up}  # not kept
            model.known_versions = list(versions)
            model.latest = max(versions, key=int)
            model.state, model.reason = ModelState.READY, ""
            logger.info("model=%s successfully loaded '%s'", name, name)  # Triton's words
            await self._retire(name, old, old_override)
            for drivers, backends in retired:  # the load returns once they are finalized
                await asyncio.to_thread(finish_update, self._loader, name, drivers, backends)

    async def _keeps_override(
        self, model: ModelEntry, *, config_json: str | None, files: dict[str, bytes] | None
    ) -> bool:
        """Triton's load without a `config` of a model serving one: while the model's files
        are unchanged since, the model stays as it is (the override holds); a changed file
        (a touched config.pbtxt) loads it from the repository again."""
        if config_json is not None or files or not model.config_override:
            return False
        if model.state != ModelState.READY:
            return False
        return await asyncio.to_thread(_fingerprint, self._ns, model.key) == model.fingerprint

    async def _load_composing(self, spec: ModelSpec, home: ModelKey) -> None:
        """Load the models an ensemble runs, before it (Triton loads them with it); a load
        error names the model that failed and why. With namespacing, each step's model is
        the one of the ensemble's namespace, else the one other holder."""
        name = spec.name
        cycle = await asyncio.to_thread(
            ensemble_cycle, self._ns.repository(home), name,
            config_name=self._config.model_config_name,
        )  # fmt: skip
        if cycle:
            raise RepositoryError(cycle_error(cycle))
        keys: dict[str, ModelKey] = {}
        for dep in composing_models(spec.config):
            keys[dep] = await asyncio.to_thread(self._ns.step_key, home, dep)
            try:
                await self.load(keys[dep], config_json=None, files=None, if_needed=True)
            except ServingError as exc:
                raise RepositoryError(
                    f"ensemble '{name}' depends on '{dep}' which has no loaded version. Model "
                    f"'{dep}' loading failed with error: {exc.message}"
                ) from exc
        for step in ensemble_steps(spec.config):
            loaded = self._models[keys[step.model_name]].versions
            if step.model_version > 0 and str(step.model_version) not in loaded:
                raise RepositoryError(
                    f"ensemble '{name}' depends on '{step.model_name}' whose required version "
                    f"{step.model_version} is not loaded."
                )

    def _refuse_decoupled_cache(self, spec: ModelSpec, key: ModelKey) -> None:
        """RepositoryError when `spec` has the cache on and is, or steps into, a decoupled model
        (runtime/models/cache_policy.py); an ensemble's steps as loaded here, else as their
        configs in the repository say (`thaw up`'s replicas load no step of theirs)."""
        if not spec.config.response_cache.enable:
            return
        steps = []
        if is_ensemble(spec.config):
            for dep in composing_models(spec.config):
                model = self._models.get(self._ns.key(dep, key.namespace))
                if model is not None and model.versions:  # loaded here: its completed config
                    steps += [v.config for v in model.versions.values()]
                    continue
                with contextlib.suppress(RepositoryError):  # its own load says what is wrong
                    steps.append(
                        read_model(
                            self._ns.repository(key),
                            dep,
                            auto_complete=False,
                            config_name=self._config.model_config_name,
                        ).config
                    )
        reason = decoupled_cache_error(spec.config, steps)
        if reason is not None:
            raise RepositoryError(reason)

    def _load_failed(
        self, model: ModelEntry, previous: ModelState | None, exc: BaseException
    ) -> None:
        if isinstance(exc, asyncio.CancelledError):
            # The server stopping (or the load call's client gone): not a failure of the model.
            reason = "load cancelled"
            logger.info("model=%s load cancelled", model.name)
        else:
            reason = exc.message if isinstance(exc, ServingError) else repr(exc)
            logger.error("model=%s %s", model.name, failed_to_load(model.name, reason))
            self._metrics.record_load_failure(model.name)
        if model.versions:  # a failed reload leaves the old versions serving
            model.state = previous or ModelState.READY
            model.reason = f"reload failed: {reason}"
        else:
            model.state, model.reason = ModelState.UNAVAILABLE, reason

    async def _retire(
        self, name: str, versions: dict[str, LoadedVersion], override: Path | None
    ) -> None:
        for version in versions.values():
            version.scheduler.close()  # on the loop: no submit can race behind it
        if versions:
            await asyncio.to_thread(self._loader.unload, name, versions)
        if override is not None:
            await asyncio.to_thread(shutil.rmtree, override, True)

    async def unload(self, key: ModelKey) -> None:
        name = key.name
        model = self._models.get(key) or self._models.setdefault(key, ModelEntry(name, key))
        async with model.lock:
            model.wanted = False
            if not model.versions and model.state is None:
                model.state, model.reason = ModelState.UNAVAILABLE, UNLOADED
                return
            model.state = ModelState.UNLOADING
            self._limits.drop(str(key))
            old, override = model.versions, model.override_dir
            model.retired_versions |= set(old)  # their rows stay, "unloaded"
            model.versions, model.override_dir = {}, None
            await self._retire(name, old, override)
            model.state, model.reason = ModelState.UNAVAILABLE, UNLOADED
            for version in sorted(old, key=int):  # tritonserver's words, a line per version
                logger.info("model=%s successfully unloaded '%s' version %s", name, name, version)

    async def poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self._config.repository_poll_secs)
            try:
                await self.poll_once()
            except OSError as exc:  # a remote repository that cannot be read now
                logger.warning("repository poll failed: %s", exc)
            except Exception:  # a bad poll must not stop future polls
                logger.exception("repository poll failed")

    async def poll_once(self) -> None:
        """Load new and changed models, unload removed ones (poll mode's one step). A remote
        repository that cannot be read raises OSError: this poll changes nothing."""
        await sync_repositories(self._sync)
        keys = set(await asyncio.to_thread(self._ns.scan))
        loaded = {k for k, m in self._models.items() if m.wanted}
        for key in sorted(loaded - keys):
            await self.unload(key)
        for key in sorted(keys):
            model = self._models.get(key)
            if model is not None and model.wanted:
                current = await asyncio.to_thread(_fingerprint, self._ns, key)
                if current == model.fingerprint:
                    continue
                logger.info("model=%s changed on disk, reloading", key)
            await self.load_quietly(key)


def _is_model_dir(ns: Namespaces, key: ModelKey) -> bool:
    """Whether the repositories hold model `key`'s directory (blocking: in a thread)."""
    return ns.model_dir(key).is_dir()


def _unchanged_versions(model: ModelEntry, spec: ModelSpec) -> dict[str, LoadedVersion]:
    """The versions up that a reload from the repository keeps (runtime.models.version_reuse);
    none when they came from a load's own files."""
    if model.override_dir is not None:
        return {}
    reuse = reusable_versions(
        before=model.served_fingerprint, after=spec.fingerprint, loaded=model.versions,
        selected=spec.versions, same_config=same_but_versions(model.served_config, spec.config),
    )  # fmt: skip
    return {version: model.versions[version] for version in reuse}


def _fingerprint(ns: Namespaces, key: ModelKey) -> tuple[tuple[str, int, int], ...]:
    """The fingerprint of model `key`'s directory (blocking: in a thread)."""
    return fingerprint(ns.model_dir(key))
