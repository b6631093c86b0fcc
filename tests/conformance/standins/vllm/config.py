"""Stand-in of `vllm.config`: `VllmConfig` and the `ModelConfig` it holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ModelConfig:
    model: str
    max_model_len: int
    supported_tasks: tuple[str, ...] = ("generate",)


@dataclass
class VllmConfig:
    model_config: ModelConfig
    extra: dict[str, Any] = field(default_factory=dict)
