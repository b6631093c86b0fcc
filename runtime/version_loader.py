"""Bring a model's versions up in a thread: restore, backend instances, scheduler."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from runtime.backends.base import Backend, LoadContext
from runtime.backends.registry import backend_class
from runtime.errors import RepositoryError, ServingError
from runtime.metrics import Metrics
from runtime.model_config import config_to_json, fill_defaults, validate_config
from runtime.model_signature import ModelSignature
from runtime.repository import ModelSpec
from runtime.scheduler import Scheduler
from runtime.stats import ModelStats, StatsBook
from tritonconfig.schema import mc

__all__ = ["LoadedVersion", "VersionLoader"]

logger = logging.getLogger(__name__)


@dataclass
class LoadedVersion:
    """One version that is up: its config, signature, instances and scheduler."""

    version: str
    config: mc.ModelConfig
    config_json: dict[str, Any]
    signature: ModelSignature
    scheduler: Scheduler
    instances: list[Backend]
    restored: bool
    stats: ModelStats


class VersionLoader:
    """Loads and unloads model versions; every method blocks and belongs in a worker thread."""

    def __init__(
        self,
        *,
        book: StatsBook,
        metrics: Metrics,
        image_loader: Any | None,
        arena: Any | None,
        inline_exec_max_us: int = 0,
    ) -> None:
        self._book = book
        self._metrics = metrics
        self._image_loader = image_loader
        self._arena = arena
        self._inline_exec_max_us = inline_exec_max_us

    def load(self, spec: ModelSpec) -> dict[str, LoadedVersion]:
        """Every version the policy selects; all or nothing (a failure unloads the rest)."""
        config = self._complete(spec)
        loaded: dict[str, LoadedVersion] = {}
        try:
            for version in spec.versions:
                loaded[str(version)] = self._load_version(spec, config, version)
        except BaseException:
            self.unload(spec.name, loaded)
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
            self._book.close(name, version.version)
            self._metrics.forget(name, version.version)

    def _complete(self, spec: ModelSpec) -> mc.ModelConfig:
        config = spec.config
        if config.backend != "python":
            return config
        from runtime.backends.python_backend import auto_complete_config

        config = auto_complete_config(config, spec.model_file(spec.versions[-1]))
        config.name = spec.name
        config.backend = "python"
        fill_defaults(config, gpu_available=False)
        validate_config(config, f"{spec.model_dir}/config.pbtxt (after auto_complete_config)")
        return config

    def _load_version(self, spec: ModelSpec, config: mc.ModelConfig, version: int) -> LoadedVersion:
        started = time.perf_counter()
        image = self._restore(spec, version)
        restored_at = time.perf_counter()
        instances = self._instances(spec, config, version, image)
        logger.debug(
            "model=%s version=%s restore+digest %.3f s, instances %.3f s",
            spec.name, version, restored_at - started, time.perf_counter() - restored_at,
        )  # fmt: skip
        # Restored only if the backend really built the model from the image's weights.
        restored = image is not None and all(getattr(i, "used_image", False) for i in instances)
        stats = self._book.open(spec.name, str(version))
        scheduler = Scheduler(
            spec.name, str(version), instances, stats, inline_max_us=self._inline_exec_max_us
        )
        seconds = time.perf_counter() - started
        self._metrics.record_load(spec.name, str(version), seconds, restored=restored)
        logger.info(
            "model=%s version=%s loaded in %.3f s (%d instance(s), restored=%s)",
            spec.name, version, seconds, len(instances), restored,
        )  # fmt: skip
        return LoadedVersion(
            version=str(version),
            config=config,
            config_json=config_to_json(config),
            signature=ModelSignature.from_config(config),
            scheduler=scheduler,
            instances=instances,
            restored=restored,
            stats=stats,
        )

    def _instances(
        self, spec: ModelSpec, config: mc.ModelConfig, version: int, image: Any | None
    ) -> list[Backend]:
        """One loaded backend per instance of every instance group; all or none."""
        instances: list[Backend] = []
        total = sum(group.count for group in config.instance_group)
        try:
            for group in config.instance_group:
                kind = mc.ModelInstanceGroup.Kind.Name(group.kind)
                for index in range(group.count):
                    backend = backend_class(config.backend)()
                    ctx = LoadContext(
                        model_name=spec.name,
                        version=str(version),
                        version_dir=spec.version_dir(version),
                        model_dir=spec.model_dir,
                        config=config,
                        instance_kind=kind,
                        device_id=group.gpus[index % len(group.gpus)] if len(group.gpus) else 0,
                        image=image,
                        instance_name=f"{group.name}_{index}",
                        instance_count=total,
                        model_file=spec.model_file(version),
                    )
                    _load_instance(backend, ctx)
                    instances.append(backend)
        except BaseException:
            for instance in instances:
                instance.unload()
            raise
        return instances

    def _restore(self, spec: ModelSpec, version: int) -> Any | None:
        """A snapshot image for these exact model files, or None to load files as usual.

        When there is an image, the model files' digest (`source_digest`: one `stat` per file
        when the cache's digest index knows them, else ~0.45 s per 256 MiB of hashing) runs in
        parallel with the restore; an image built from other files is then thrown away. With
        no image nothing is hashed (that would compete with the normal load for the CPUs).
        """
        if self._image_loader is None or spec.config.backend not in ("onnxruntime", "pytorch"):
            return None
        import snapshotter  # only servers with a store/cache configured get here

        digest_of = getattr(self._image_loader, "source_digest", snapshotter.source_digest)
        try:
            ref = self._image_loader.find(spec.name, str(version), None)
            if ref is None:
                return None
            pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="thaw-digest")
            digest = pool.submit(digest_of, spec.version_dir(version))
            pool.shutdown(wait=False)  # a failed restore never waits for the hash
            # The pre-faulted arena holds one image: the first restore takes it for good.
            arena, self._arena = self._arena, None
            image = self._image_loader.restore(ref, arena=arena)
            waited = time.perf_counter()
            same = image.manifest.source_digest == digest.result()
            logger.debug(
                "model=%s version=%s restore %s, waited %.3f s for the source digest",
                spec.name, version, image.timings, time.perf_counter() - waited,
            )  # fmt: skip
            if not same:
                logger.info("model=%s version=%s image is stale, loading files", spec.name, version)
                self._arena = arena
                return None
            return image
        except Exception as exc:  # a bad image must not stop the model from loading
            logger.warning(
                "model=%s version=%s snapshot restore failed, loading files: %r",
                spec.name, version, exc,
            )  # fmt: skip
            return None


def _load_instance(backend: Backend, ctx: LoadContext) -> None:
    """Load one instance; framework exceptions become errors that name the model."""
    try:
        backend.load(ctx)
    except ServingError:
        raise
    except MemoryError as exc:
        raise ServingError(f"model '{ctx.model_name}' ran out of memory while loading") from exc
    except BaseException as exc:  # a model file's sys.exit() must not stop the server
        raise RepositoryError(
            f"failed to load model '{ctx.model_name}' version {ctx.version}: {exc!r}"
        ) from exc
