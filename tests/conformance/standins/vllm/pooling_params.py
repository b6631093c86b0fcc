"""Stand-in of `vllm.pooling_params`: `PoolingParams`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PoolingParams:
    dimensions: int | None = None
    task: str | None = None
