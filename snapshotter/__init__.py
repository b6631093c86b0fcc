"""Thaw's snapshotter: build, store and restore model images (weights laid out for the runtime).

Public names the runtime may import (see docs/ARCHITECTURE.md); everything else is internal.
"""

from __future__ import annotations

from snapshotter.arena import Arena
from snapshotter.compile_cache import arg_positions, compile_for_serving, warmup_inputs
from snapshotter.errors import (
    ArtifactError,
    BuildError,
    ImageNotFound,
    ImageRefError,
    IntegrityError,
    ManifestError,
    NothingToImage,
    SnapshotError,
    SnapshotStoreError,
    StoreTimeout,
)
from snapshotter.image_builder import build_image
from snapshotter.image_ref import ImageRef
from snapshotter.manifest import Manifest
from snapshotter.restore import ImageLoader
from snapshotter.restored_image import RestoredImage
from snapshotter.source_digest import source_digest
from snapshotter.sources.ort_optimize import host_key as ort_host_key
from snapshotter.stores import open_store
from snapshotter.trt_cache import session_options as trt_session_options

__all__ = [
    "Arena",
    "ArtifactError",
    "BuildError",
    "ImageLoader",
    "ImageNotFound",
    "ImageRef",
    "ImageRefError",
    "IntegrityError",
    "Manifest",
    "ManifestError",
    "NothingToImage",
    "RestoredImage",
    "SnapshotError",
    "SnapshotStoreError",
    "StoreTimeout",
    "arg_positions",
    "build_image",
    "compile_for_serving",
    "open_store",
    "ort_host_key",
    "source_digest",
    "trt_session_options",
    "warmup_inputs",
]
