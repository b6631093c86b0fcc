"""Restore a model version's snapshot image for its exact files, or say why the files load instead.

    find ─▶ restore per device ‖ source digest (in parallel) ─▶ same files? ─▶ {device: image}
      │         │                                              └─ no ─▶ {} (stale: files load)
      └─ none ─▶ {}              ├─ DeviceMemoryError ─▶ logged, counted, the load fails (503):
                                 │                       files would not fit on that GPU either
                                 ├─ SnapshotError / OSError ─▶ logged, counted, that device's
                                 │                             instances load their files
                                 └─ anything else (a bug) ─▶ logged, counted, the load fails

One restore per distinct device the version's instances run on (`device_plan`): "cpu" into a
host arena, "cuda:N" into that GPU's memory. A failed restore the snapshotter reports (a corrupt
chunk, a store that is down, an unreadable cache) costs a classic load; a bug must not hide as
a slower cold start, so it fails the load.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from runtime.backends.snapshot_image import SnapshotImage
from runtime.errors import DeviceOutOfMemory, ServingError
from runtime.models.repository import ModelSpec
from runtime.observe.metrics import Metrics

if TYPE_CHECKING:
    from snapshotter import Arena, ImageRef

__all__ = ["ImageSource", "SnapshotRestorer"]

logger = logging.getLogger(__name__)

# The backends that can load from an image (the others load their files).
_IMAGE_BACKENDS = frozenset({"onnxruntime", "pytorch", "tensorrt"})


class ImageSource(Protocol):
    """What the runtime needs of the snapshotter's `ImageLoader` (blocking calls)."""

    def source_digest(self, version_dir: Path) -> str:
        """Digest of a version's files (cheap when the cache's digest index knows them)."""
        ...

    def find(self, model: str, version: str, source_digest: str | None) -> ImageRef | None:
        """The image of this model version for this target (None digest: any), or None."""
        ...

    def restore(
        self, ref: ImageRef, arena: Arena | None = None, *, device: str | None = None
    ) -> SnapshotImage:
        """Restore `ref` (into `arena` when it is big enough; the arena is the image's then);
        `device="cuda:N"` restores into that GPU's memory instead."""
        ...


class SnapshotRestorer:
    """Restores images for one server; `restore` blocks and belongs in a worker thread."""

    def __init__(self, source: ImageSource, *, arena: Arena | None, metrics: Metrics) -> None:
        self._source = source
        self._arena = arena  # a warm-pool process's pre-faulted arena, for the first restore
        self._handed: Arena | None = None  # the arena the last host restore was given
        self._metrics = metrics

    def restore(
        self, spec: ModelSpec, version: int, devices: tuple[str, ...] = ("cpu",)
    ) -> dict[str, SnapshotImage]:
        """The image for these exact model files on each of `devices` that could be restored
        ({} to load the files as usual).

        Raises DeviceOutOfMemory when a GPU has no room for the image, ServingError when the
        restore failed in a way the snapshotter does not report (a bug): the load fails instead
        of quietly falling back to the files."""
        if spec.config.backend not in _IMAGE_BACKENDS:
            return {}
        from snapshotter import DeviceMemoryError, SnapshotError  # servers with a store/cache

        ref = self._source.find(spec.name, str(version), None)
        if ref is None:
            return {}
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="thaw-digest")
        digest = pool.submit(self._source.source_digest, spec.version_dir(version))
        pool.shutdown(wait=False)  # a failed restore never waits for the hash
        images: dict[str, SnapshotImage] = {}
        for device in devices:
            try:
                images[device] = self._restore_on(ref, device)
            except DeviceMemoryError as exc:
                self._metrics.record_restore_failure(spec.name, type(exc).__name__)
                self._metrics.record_device_oom(spec.name, device)
                logger.warning("model=%s version=%s restore to %s: %s", spec.name, version,
                               device, exc)  # fmt: skip
                raise DeviceOutOfMemory(f"model '{spec.name}' version {version}: {exc}") from exc
            except (SnapshotError, OSError) as exc:
                self._metrics.record_restore_failure(spec.name, type(exc).__name__)
                logger.warning(
                    "model=%s version=%s snapshot restore to %s failed, loading files: %r",
                    spec.name, version, device, exc,
                )  # fmt: skip
            except Exception as exc:
                self._metrics.record_restore_failure(spec.name, type(exc).__name__)
                logger.exception("model=%s version=%s snapshot restore raised", spec.name, version)
                raise ServingError(
                    f"model '{spec.name}' version {version}: snapshot restore failed: {exc!r}"
                ) from exc
        return self._same_files(spec, version, images, digest.result) if images else {}

    def _restore_on(self, ref: ImageRef, device: str) -> SnapshotImage:
        """One restore. The pre-faulted arena holds one host image: the first takes it."""
        if device != "cpu":
            return self._source.restore(ref, device=device)
        arena, self._arena = self._arena, None
        self._handed = arena
        return self._source.restore(ref, arena=arena)

    def _same_files(
        self,
        spec: ModelSpec,
        version: int,
        images: dict[str, SnapshotImage],
        digest: Callable[[], str],
    ) -> dict[str, SnapshotImage]:
        """`images` when they were built from these files, else {} (stale: the files load).

        When there is an image, the model files' digest (`source_digest`: one `stat` per file
        when the cache's digest index knows them, else ~0.45 s per 256 MiB of hashing) runs in
        parallel with the restore; an image built from other files is then thrown away. With
        no image nothing is hashed (that would compete with the normal load for the CPUs).
        """
        waited = time.perf_counter()
        expected = digest()
        first = next(iter(images.values()))
        logger.debug(
            "model=%s version=%s restore %s, waited %.3f s for the source digest",
            spec.name, version, dict(first.timings), time.perf_counter() - waited,
        )  # fmt: skip
        if first.manifest.source_digest != expected:
            logger.info("model=%s version=%s image is stale, loading files", spec.name, version)
            if "cpu" in images:
                self._arena = self._handed  # the files do not use it: keep it for the next
            return {}
        return images
