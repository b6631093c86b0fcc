"""Thaw's snapshotter: build, store and restore model images (weights laid out for the runtime).

Public names the runtime may import (see docs/ARCHITECTURE.md); everything else is internal.
"""

from __future__ import annotations

from snapshotter.arena import Arena
from snapshotter.compile_cache import arg_positions, compile_for_serving, warmup_inputs
from snapshotter.cuda_copier import cuda_available
from snapshotter.cuda_restore import DeviceConfig
from snapshotter.device_budget import DeviceMemory, vram_shortfall
from snapshotter.errors import (
    ArtifactError,
    BuildError,
    DeviceCopyError,
    DeviceMemoryError,
    ImageNotFound,
    ImageRefError,
    IntegrityError,
    ManifestError,
    NothingToImage,
    RestoreCancelled,
    SnapshotError,
    SnapshotStoreError,
    StoreTimeout,
)
from snapshotter.gpu_probe import (
    GpuInfo,
    GpuScan,
    cuda_target,
    local_gpus,
    nvml_memory,
    visible_devices,
)
from snapshotter.image_builder import build_image
from snapshotter.image_ref import ImageRef
from snapshotter.manifest import Manifest
from snapshotter.plan_engine import plan_from_image as tensorrt_plan_from_image
from snapshotter.restore import ImageLoader
from snapshotter.restored_image import RestoredImage
from snapshotter.source_digest import source_digest
from snapshotter.sources.ort_optimize import host_key as ort_host_key
from snapshotter.staging_ring import StagingPool
from snapshotter.stores import open_store
from snapshotter.trt_cache import context_model as trt_context_model
from snapshotter.trt_cache import session_options as trt_session_options

__all__ = [
    "Arena",
    "ArtifactError",
    "BuildError",
    "DeviceConfig",
    "DeviceCopyError",
    "DeviceMemory",
    "DeviceMemoryError",
    "GpuInfo",
    "GpuScan",
    "ImageLoader",
    "ImageNotFound",
    "ImageRef",
    "ImageRefError",
    "IntegrityError",
    "Manifest",
    "ManifestError",
    "NothingToImage",
    "RestoreCancelled",
    "RestoredImage",
    "SnapshotError",
    "SnapshotStoreError",
    "StagingPool",
    "StoreTimeout",
    "arg_positions",
    "build_image",
    "compile_for_serving",
    "cuda_available",
    "cuda_target",
    "local_gpus",
    "nvml_memory",
    "open_store",
    "ort_host_key",
    "source_digest",
    "tensorrt_plan_from_image",
    "trt_context_model",
    "trt_session_options",
    "visible_devices",
    "vram_shortfall",
    "warmup_inputs",
]
