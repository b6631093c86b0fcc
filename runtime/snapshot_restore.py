"""Restore a model version's snapshot image for its exact files, or say why the files load instead.

    find ─▶ restore ‖ source digest (in parallel) ─▶ same files? ─▶ image
      │         │                                        └─ no ─▶ None (stale: files load)
      └─ none ─▶ None            └─ SnapshotError / OSError ─▶ logged, counted, None (files load)
                                 └─ anything else (a bug) ─▶ logged, counted, the load fails

A failed restore the snapshotter reports (a corrupt chunk, a store that is down, an unreadable
cache) costs a classic load; a bug must not hide as a slower cold start, so it fails the load.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from runtime.backends.snapshot_image import SnapshotImage
from runtime.errors import ServingError
from runtime.metrics import Metrics
from runtime.repository import ModelSpec

if TYPE_CHECKING:
    from snapshotter import Arena, ImageRef

__all__ = ["ImageSource", "SnapshotRestorer"]

logger = logging.getLogger(__name__)

# The backends that can load from an image (the others load their files).
_IMAGE_BACKENDS = frozenset({"onnxruntime", "pytorch"})


class ImageSource(Protocol):
    """What the runtime needs of the snapshotter's `ImageLoader` (blocking calls)."""

    def source_digest(self, version_dir: Path) -> str:
        """Digest of a version's files (cheap when the cache's digest index knows them)."""
        ...

    def find(self, model: str, version: str, source_digest: str | None) -> ImageRef | None:
        """The image of this model version for this target (None digest: any), or None."""
        ...

    def restore(self, ref: ImageRef, arena: Arena | None = None) -> SnapshotImage:
        """Restore `ref` (into `arena` when it is big enough; the arena is the image's then)."""
        ...


class SnapshotRestorer:
    """Restores images for one server; `restore` blocks and belongs in a worker thread."""

    def __init__(self, source: ImageSource, *, arena: Arena | None, metrics: Metrics) -> None:
        self._source = source
        self._arena = arena  # a warm-pool process's pre-faulted arena, for the first restore
        self._metrics = metrics

    def restore(self, spec: ModelSpec, version: int) -> SnapshotImage | None:
        """The image for these exact model files, or None to load the files as usual.

        Raises ServingError when the restore failed in a way the snapshotter does not report
        (a bug): the load fails instead of quietly falling back to the files."""
        if spec.config.backend not in _IMAGE_BACKENDS:
            return None
        from snapshotter import SnapshotError  # only servers with a store/cache get here

        try:
            return self._restore(spec, version)
        except (SnapshotError, OSError) as exc:
            self._metrics.record_restore_failure(spec.name, type(exc).__name__)
            logger.warning(
                "model=%s version=%s snapshot restore failed, loading files: %r",
                spec.name, version, exc,
            )  # fmt: skip
            return None
        except Exception as exc:
            self._metrics.record_restore_failure(spec.name, type(exc).__name__)
            logger.exception("model=%s version=%s snapshot restore raised", spec.name, version)
            raise ServingError(
                f"model '{spec.name}' version {version}: snapshot restore failed: {exc!r}"
            ) from exc

    def _restore(self, spec: ModelSpec, version: int) -> SnapshotImage | None:
        """When there is an image, the model files' digest (`source_digest`: one `stat` per file
        when the cache's digest index knows them, else ~0.45 s per 256 MiB of hashing) runs in
        parallel with the restore; an image built from other files is then thrown away. With
        no image nothing is hashed (that would compete with the normal load for the CPUs).
        """
        ref = self._source.find(spec.name, str(version), None)
        if ref is None:
            return None
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="thaw-digest")
        digest = pool.submit(self._source.source_digest, spec.version_dir(version))
        pool.shutdown(wait=False)  # a failed restore never waits for the hash
        # The pre-faulted arena holds one image: the first restore takes it for good.
        arena, self._arena = self._arena, None
        image = self._source.restore(ref, arena=arena)
        waited = time.perf_counter()
        same = image.manifest.source_digest == digest.result()
        logger.debug(
            "model=%s version=%s restore %s, waited %.3f s for the source digest",
            spec.name, version, dict(image.timings), time.perf_counter() - waited,
        )  # fmt: skip
        if not same:
            logger.info("model=%s version=%s image is stale, loading files", spec.name, version)
            self._arena = arena
            return None
        return image
