"""Stand-in of `vllm.engine.arg_utils`: `AsyncEngineArgs` and the config it creates."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from vllm.config import ModelConfig, VllmConfig
from vllm.usage.usage_lib import UsageContext

# A Hugging Face model id (org/name), which vLLM would download; the stand-in has no weights
# and downloads nothing, so it only checks the id's form.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass
class AsyncEngineArgs:
    """vLLM's engine arguments (the ones vllm_backend's samples and tests use, and the common
    ones of a `model.json`); a dataclass, so an unknown argument is a TypeError, as in vLLM."""

    model: str = "facebook/opt-125m"
    tokenizer: str | None = None
    dtype: str = "auto"
    seed: int | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    enforce_eager: bool = False
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    trust_remote_code: bool = False
    disable_log_stats: bool = False
    enable_log_requests: bool = False
    aggregate_engine_logging: bool = False
    enable_lora: bool = False
    max_loras: int = 1
    max_lora_rank: int = 16
    runner: str = "auto"  # "pooling": the engine embeds instead of generating

    def create_engine_config(self, usage_context: UsageContext | None = None) -> VllmConfig:
        """The engine's config; ValueError for a model that is neither a directory nor a hub id
        (vLLM fails there too, when it cannot find the model)."""
        if not (os.path.isdir(self.model) or _HUB_ID.match(self.model)):
            raise ValueError(
                f"Invalid repository ID or local directory specified: '{self.model}' "
                "(thaw's vllm stand-in)"
            )
        tasks: tuple[str, ...] = ("embed",) if self.runner == "pooling" else ("generate",)
        model_config = ModelConfig(
            model=self.model, max_model_len=self.max_model_len or 2048, supported_tasks=tasks
        )
        extra: dict[str, Any] = {"usage_context": usage_context, "seed": self.seed}
        return VllmConfig(model_config=model_config, extra=extra)
