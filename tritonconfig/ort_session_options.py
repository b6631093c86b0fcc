"""The model config settings Triton's onnxruntime backend gives a session, read as it reads
them (its README's "Other Optimization Options"):

    optimization { graph { level } }   -1 basic, 1 extended, 2 none; anything else (0, the
                                       default) all of onnxruntime's graph optimizations
    execution_mode                     "0" sequential (the default), "1" parallel; other
                                       values refuse the load in Triton's words
    intra_op_thread_count              threads within a node: a count, 0 onnxruntime's choice
                                       (Thaw's default when absent: the cores shared by the
                                       model's instances)
    inter_op_thread_count              threads across nodes (parallel mode): a count above 0
                                       (Thaw's default when absent: 1)
    enable_mem_arena, enable_mem_pattern  the CPU memory arena and memory patterns on or off
    memory.enable_memory_arena_shrinkage  a run option, given to every run (e.g. "cpu:0")

`ort_settings(config, instance_count)` reads them (ModelConfigError for a value Triton
refuses), `OrtSettings.apply(options, ort)` sets them on a SessionOptions, and
`run_options(ort)` makes the RunOptions each run takes (None when there are none).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from tritonconfig.errors import ModelConfigError
from tritonconfig.model_parameters import optional_bool, optional_int, optional_string
from tritonconfig.schema import mc

__all__ = ["ARENA_SHRINKAGE", "OrtSettings", "intra_op_threads", "ort_settings"]

ARENA_SHRINKAGE = "memory.enable_memory_arena_shrinkage"
# optimization.graph.level -> onnxruntime's GraphOptimizationLevel member (others: ENABLE_ALL)
_LEVELS = {-1: "ORT_ENABLE_BASIC", 1: "ORT_ENABLE_EXTENDED", 2: "ORT_DISABLE_ALL"}


@dataclass(frozen=True)
class OrtSettings:
    """What a model's config sets on its onnxruntime session (module docstring)."""

    graph_level: str = "ORT_ENABLE_ALL"
    parallel: bool = False
    intra_op_threads: int = 1
    inter_op_threads: int = 1
    mem_arena: bool | None = None
    mem_pattern: bool | None = None
    arena_shrinkage: str | None = None

    @property
    def all_optimizations(self) -> bool:
        """Whether onnxruntime runs every graph optimization (the default)."""
        return self.graph_level == "ORT_ENABLE_ALL"

    def apply(self, options: Any, ort: Any) -> None:
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, self.graph_level)
        options.execution_mode = (
            ort.ExecutionMode.ORT_PARALLEL if self.parallel else ort.ExecutionMode.ORT_SEQUENTIAL
        )
        options.intra_op_num_threads = self.intra_op_threads
        options.inter_op_num_threads = self.inter_op_threads
        if self.mem_arena is not None:
            options.enable_cpu_mem_arena = self.mem_arena
        if self.mem_pattern is not None:
            options.enable_mem_pattern = self.mem_pattern

    def run_options(self, ort: Any) -> Any:
        """The RunOptions every run of the session takes, or None."""
        if self.arena_shrinkage is None:
            return None
        options = ort.RunOptions()
        options.add_run_config_entry(ARENA_SHRINKAGE, self.arena_shrinkage)
        return options


def intra_op_threads(count: int | None, instance_count: int) -> int:
    """Intra-op threads per session: the config's count (0: onnxruntime's choice), else the
    cores shared by the model's instances."""
    if count is not None and count >= 0:
        return count
    return max(1, (os.cpu_count() or 1) // max(1, instance_count))


def ort_settings(config: mc.ModelConfig, instance_count: int) -> OrtSettings:
    """The model's OrtSettings; ModelConfigError for a value Triton's backend refuses."""
    mode = optional_int(config, "execution_mode") or 0
    if mode not in (0, 1):
        raise ModelConfigError(
            "Invalid configuration value provided. Expected values for  execution_mode are 0 "
            f"or 1 but got {mode} ."
        )
    inter = optional_int(config, "inter_op_thread_count")
    return OrtSettings(
        graph_level=_LEVELS.get(config.optimization.graph.level, "ORT_ENABLE_ALL"),
        parallel=mode == 1,
        intra_op_threads=intra_op_threads(optional_int(config, "intra_op_thread_count"),
                                          instance_count),
        inter_op_threads=inter if inter is not None and inter > 0 else 1,
        mem_arena=optional_bool(config, "enable_mem_arena"),
        mem_pattern=optional_bool(config, "enable_mem_pattern"),
        arena_shrinkage=optional_string(config, ARENA_SHRINKAGE),
    )  # fmt: skip
