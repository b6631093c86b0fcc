"""Readers that pull weights and weightless artifacts out of the model formats Triton users have.

    onnx_source         ONNX: initializers move into the image, the graph keeps references
    ort_optimize        onnxruntime's optimized graph, made at build time
    torchscript_source  TorchScript: parameters and buffers move into the image
    export_source       `torch.export` programs: the state dict moves into the image
    safetensors_source  safetensors files: every tensor moves into the image
    checkpoint_dir      a sharded safetensors checkpoint directory (shards, index, tokenizer)

Exports what every reader hands the builder, defined here: `ExtractedModel` and `SourceTensor`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["ExtractedModel", "SourceTensor"]


@dataclass(frozen=True)
class SourceTensor:
    """One weight: its manifest dtype name and its bytes as a C-contiguous numpy array."""

    name: str
    dtype: str
    array: np.ndarray


@dataclass(frozen=True)
class ExtractedModel:
    """What a source reader hands the builder: weights in runtime order, plus artifacts."""

    framework: str
    tensors: list[SourceTensor]
    artifacts: dict[str, bytes] = field(default_factory=dict)
    framework_versions: dict[str, str] = field(default_factory=dict)
    shards: tuple[Path, ...] = ()
    """The checkpoint files the tensors came from (recorded in the manifest with digests)."""
    files: tuple[Path, ...] = ()
    """Files stored beside the weights and restored to disk (tokenizer, configs, index)."""
