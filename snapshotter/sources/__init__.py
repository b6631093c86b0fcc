"""Readers that pull weights and weightless artifacts out of the model formats Triton users have."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


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
