"""Stand-in of `vllm.v1.metrics.loggers`: the stat logger base and factory type."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vllm.config import VllmConfig

StatLoggerFactory = Callable[[VllmConfig, int], "StatLoggerBase"]


class StatLoggerBase:
    """What the engine calls: `record(...)` after each step, `log_engine_initialized()`."""

    def __init__(self, vllm_config: VllmConfig, engine_index: int = 0) -> None:
        self.vllm_config = vllm_config
        self.engine_index = engine_index

    def record(self, scheduler_stats: Any, iteration_stats: Any, *args: Any, **kw: Any) -> None:
        raise NotImplementedError

    def log_engine_initialized(self) -> None:
        raise NotImplementedError

    def log(self) -> None:
        pass


def build_buckets(mantissa_lst: list[int], max_value: int) -> list[int]:
    """vLLM's bucket builder: each mantissa times rising powers of ten, up to max_value."""
    exponent, buckets = 0, []
    while True:
        for m in mantissa_lst:
            value = m * 10**exponent
            if value > max_value:
                return buckets
            buckets.append(value)
        exponent += 1


def build_1_2_5_buckets(max_value: int) -> list[int]:
    """[1, 2, 5, 10, 20, 50, ...] up to max_value, as vLLM's."""
    return build_buckets([1, 2, 5], max_value)
