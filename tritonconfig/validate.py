"""Refuse the configs Triton refuses; every message names the source and the field."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from tritonconfig.ensemble import validate_ensemble
from tritonconfig.errors import ModelConfigError
from tritonconfig.schema import mc
from tritonconfig.sequence import validate_sequence_batching

__all__ = ["io_shape_problem", "validate_config"]

_IO_NAME = re.compile(r"^[A-Za-z0-9_.:/\-\[\]]+$")


def validate_config(config: mc.ModelConfig, source: str) -> None:
    """ModelConfigError for the first field Triton would refuse (run after `fill_defaults`)."""
    if config.max_batch_size < 0:
        raise ModelConfigError(
            f"{source}: 'max_batch_size' must be non-negative value for {config.name}"
        )
    _validate_ios(config.input, "input", config, source)
    _validate_ios(config.output, "output", config, source)
    if config.backend != "python" and len(config.output) == 0:
        raise ModelConfigError(
            f"{source}: model configuration must contain at least one output, none were specified"
        )
    # No rule on inputs: a model may take none, as in Triton; a config that lists fewer than
    # its model takes is refused by the backend's load, with the two counts in Triton's words.
    _validate_instance_groups(config, source)
    _validate_batch_ios(config, source)
    policy = config.version_policy
    if policy.WhichOneof("policy_choice") == "latest" and policy.latest.num_versions < 1:
        raise ModelConfigError(
            f"{source}: version_policy.latest.num_versions = {policy.latest.num_versions}, "
            "must be >= 1"
        )
    _validate_dynamic_batching(config, source)
    validate_sequence_batching(config, source)
    validate_ensemble(config, source)


def _validate_dynamic_batching(config: mc.ModelConfig, source: str) -> None:
    """Triton's checks of `dynamic_batching`: preferred sizes, priority levels, ordering."""
    if not config.HasField("dynamic_batching"):
        return
    batching, name = config.dynamic_batching, config.name
    for size in batching.preferred_batch_size:
        if size <= 0:
            raise ModelConfigError(
                f"{source}: dynamic batching preferred size must be positive for {name}"
            )
        if size > config.max_batch_size:
            raise ModelConfigError(
                f"{source}: dynamic batching preferred size must be <= max batch size for {name}"
            )
    levels = batching.priority_levels
    if levels != 0:
        if not 1 <= batching.default_priority_level <= levels:
            raise ModelConfigError(
                f"{source}: default priority level must be in range [1, {levels}] for {name}"
            )
        for level in batching.priority_queue_policy:
            if not 1 <= level <= levels:
                raise ModelConfigError(
                    f"{source}: priority queue policy must have priority level in range "
                    f"[1, {levels}] for {name}"
                )
    if batching.preserve_ordering:
        if levels > 1:
            raise ModelConfigError(
                f"{source}: Only one priority level is allowed when 'preserve_ordering' is true "
                f"for {name}"
            )
        policies = [batching.default_queue_policy, *batching.priority_queue_policy.values()]
        for policy in policies:
            if policy.default_timeout_microseconds and policy.timeout_action == policy.DELAY:
                raise ModelConfigError(
                    f"{source}: Queue policy can not have DELAY as timeout action when "
                    f"'preserve_ordering' is true for {name}"
                )


def _validate_instance_groups(config: mc.ModelConfig, source: str) -> None:
    """Triton's checks of each instance group that need no GPU list: count, kind, GPU ids.
    A negative GPU id is looked for in every group first: it is wrong on any machine, where a
    `KIND_AUTO` group naming GPUs is `KIND_CPU` only on a machine without one."""
    for group in config.instance_group:
        negative = [gpu for gpu in group.gpus if gpu < 0]
        if negative:
            raise ModelConfigError(
                f"{source}: instance group {group.name} of model {config.name} specifies invalid "
                f"or unsupported gpu id {negative[0]}. GPUs with at least the minimum required "
                "CUDA compute compatibility are: none"
            )
    for group in config.instance_group:
        label = f"instance group {group.name} of model {config.name}"
        if group.count < 0:
            raise ModelConfigError(
                f"{source}: instance_group '{group.name}' count = {group.count}, must be >= 1"
            )
        if group.kind == mc.ModelInstanceGroup.KIND_MODEL and config.backend != "python":
            raise ModelConfigError(f"{source}: instance_group kind KIND_MODEL is not supported")
        if group.kind == mc.ModelInstanceGroup.KIND_CPU and len(group.gpus):
            raise ModelConfigError(
                f"{source}: {label} has kind KIND_CPU but specifies one or more GPUs"
            )


# The batch input / output kinds that read one source input; the others read none.
_ONE_SOURCE_INPUT = frozenset(
    {
        "BATCH_ELEMENT_COUNT",
        "BATCH_ACCUMULATED_ELEMENT_COUNT",
        "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO",
        "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE",
        "BATCH_ITEM_SHAPE",
        "BATCH_ITEM_SHAPE_FLATTEN",
        "BATCH_SCATTER_WITH_INPUT_SHAPE",
    }
)


def _validate_batch_ios(config: mc.ModelConfig, source: str) -> None:
    """Triton's checks of `batch_input` and `batch_output`: source inputs counted and known,
    each output a target once."""
    inputs = {io.name for io in config.input}
    outputs = {io.name for io in config.output}
    for field, entries in (("input", config.batch_input), ("output", config.batch_output)):
        kinds = mc.BatchInput.Kind if field == "input" else mc.BatchOutput.Kind
        targets: set[str] = set()
        for entry in entries:
            if field == "output":
                for target in entry.target_name:
                    if target in targets:
                        raise ModelConfigError(
                            f"{source}: target output name '{target}' can only be specified once"
                        )
                    targets.add(target)
                    if target not in outputs:
                        raise ModelConfigError(f"{source}: unknown target output name '{target}'")
            kind = kinds.Name(entry.kind)
            wanted = 1 if kind in _ONE_SOURCE_INPUT else 0
            if len(entry.source_input) != wanted:
                raise ModelConfigError(
                    f"{source}: batch {field} kind '{kind}' expects {wanted} source input, "
                    f"got {len(entry.source_input)}"
                )
            for name in entry.source_input:
                if name not in inputs:
                    raise ModelConfigError(f"{source}: unknown source input name '{name}'")


def _validate_ios(ios: Iterable[Any], field: str, config: mc.ModelConfig, source: str) -> None:
    seen: set[str] = set()
    for io in ios:
        if not io.name:
            raise ModelConfigError(f"{source}: {field} without a name")
        if not _IO_NAME.match(io.name):
            raise ModelConfigError(f"{source}: {field} '{io.name}' has an invalid name")
        if io.name in seen:
            raise ModelConfigError(f"{source}: duplicate {field} name '{io.name}'")
        seen.add(io.name)
        prefix = f"{source}: model {field} '{io.name}'"
        if io.data_type == mc.TYPE_INVALID or io.data_type not in mc.DataType.values():
            raise ModelConfigError(f"{prefix} must specify 'data_type' for {config.name}")
        if len(io.dims) == 0 and not io.HasField("reshape") and config.max_batch_size == 0:
            raise ModelConfigError(f"{prefix} must specify 'dims' for {config.name}")
        problem = io_shape_problem(
            list(io.dims),
            list(io.reshape.shape) if io.HasField("reshape") else None,
            batching=config.max_batch_size > 0,
        )
        if problem:
            raise ModelConfigError(f"{prefix} {problem} for {config.name}")


def io_shape_problem(dims: list[int], reshape: list[int] | None, *, batching: bool) -> str:
    """What Triton says is wrong with an input's or output's `dims` and `reshape` (None: no
    reshape), or "" when nothing is. -1 is a variable-size dimension; a reshape must hold as
    many elements as dims, trunk by trunk between the variable-size dimensions."""
    if reshape is not None and not reshape and not batching:
        return (
            "cannot have empty reshape for non-batching model as scalar tensors are not supported"
        )
    if any(d < 1 and d != -1 for d in dims):
        return "dimension must be integer >= 1, or -1 to indicate a variable-size dimension"
    if reshape is None:
        return ""
    if any(d < 1 and d != -1 for d in reshape):
        return (
            "reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension"
        )
    dims_count, reshape_count = _element_count(dims), _element_count(reshape)
    if (dims_count != -1 or reshape_count != -1) and dims_count != reshape_count:
        return "has different size for dims and reshape"
    if dims_count == -1:
        dims_trunks, reshape_trunks = _trunks(dims), _trunks(reshape)
        if len(dims_trunks) != len(reshape_trunks):
            return "has different number of variable-size dimensions for dims and reshape"
        if dims_trunks != reshape_trunks:
            return "has different size for dims and reshape"
    return ""


def _element_count(shape: list[int]) -> int:
    """The elements a shape holds; -1 when a dimension is variable-size."""
    return -1 if -1 in shape else math.prod(shape)


def _trunks(shape: list[int]) -> list[int]:
    """The element counts between (and around) the variable-size dimensions of a shape."""
    counts, current = [], 1
    for dim in shape:
        if dim == -1:
            counts.append(current)
            current = 1
        else:
            current *= dim
    counts.append(current)
    return counts
