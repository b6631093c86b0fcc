"""Thaw's snapshotter: build, store and restore model images (weights laid out for the runtime).

    cli                 `thaw snapshot build|push|pull|ls|verify|gc`: the command line
    image_builder       build an image from a model version directory: extract, lay out, hash, store
    sources/            readers of the model formats (ONNX, TorchScript, torch.export, safetensors)
    compiled_artifacts  the compiled artifacts an image carries, chosen, built and verified
    compile_cache       `torch.compile` of torch.export programs, its caches as artifacts
    trt_cache           onnxruntime's TensorRT EP: its engine and timing caches as an artifact
    plan_engine         `tensorrt_plan` models: the plan as an artifact keyed by GPU and TensorRT
    ep_context          onnxruntime's EP-context model made relocatable
    artifact_archive    directory trees as artifacts: a deterministic tar, a checked unpack
    artifact_key        what a compiled artifact was built for, and why it does not fit (pure)
    engine_key          what a compiled GPU engine is valid for: its cache key (pure)
    model_files         a checkpoint's small files (tokenizer, configs, index) as blobs
    published_dir       a directory that appears whole or not at all (temp, then rename)
    manifest            the versioned image manifest: tensors, chunks, artifacts; strict parsing
    image_ref           image references (`MODEL[:VERSION]`) and the names that key an image
    source_digest       the content digest of a model version directory
    digest_index        a persistent memo of model-file hashes
    content_address     sha256 digests -> store paths
    ordered_digest      sha256 of a buffer whose pieces land out of order
    stores/             image stores: a directory, S3; `open_store` from a URI
    transfer            copy, verify and garbage-collect images between stores
    pvc_cache           the node-local image cache: verified fills, locks, LRU budget
    host_cache          the host-memory tier: restored images in a shared tmpfs
    restore             ImageLoader: find an image, restore it into an arena
    device_restore      ImageLoader's GPU target: chunks from its tiers into one device arena
    chunk_trust         whether a chunk's bytes may be served: digest, or its file's marker
    restored_image      RestoredImage: one image's weights as views into an arena
    arena               one preallocated, page-aligned host memory arena
    parallel_read       read file ranges into caller memory with several threads
    direct_io           O_DIRECT file I/O into page-aligned memory, page-cache probes
    staging_ring        stream file pieces into a device arena through pinned staging
    cuda_restore        restore an image into one device arena
    cuda_copier         the CUDA DeviceCopier: device buffers, pinned memory, async copies
    device_budget       whether a restore fits a device's free memory (pure)
    gpu_probe           which GPUs this process can use, read without a CUDA context
    errors              the snapshotter's one error tree

Exports the public names the runtime may import (docs/ARCHITECTURE.md); everything else is
internal.
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
