"""Refuse the configs Triton refuses; every message names the source and the field."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from tritonconfig.ensemble import validate_ensemble
from tritonconfig.errors import ModelConfigError
from tritonconfig.schema import mc
from tritonconfig.sequence import validate_sequence_batching

__all__ = ["validate_config"]

_IO_NAME = re.compile(r"^[A-Za-z0-9_.:/\-\[\]]+$")


def validate_config(config: mc.ModelConfig, source: str) -> None:
    """ModelConfigError for the first field Triton would refuse (run after `fill_defaults`)."""
    if config.max_batch_size < 0:
        raise ModelConfigError(f"{source}: max_batch_size = {config.max_batch_size}, must be >= 0")
    _validate_ios(config.input, "input", config, source)
    _validate_ios(config.output, "output", config, source)
    if config.backend != "python" and (len(config.input) == 0 or len(config.output) == 0):
        raise ModelConfigError(f"{source}: model must declare at least one input and one output")
    for group in config.instance_group:
        if group.count < 0:
            raise ModelConfigError(
                f"{source}: instance_group '{group.name}' count = {group.count}, must be >= 1"
            )
        if group.kind == mc.ModelInstanceGroup.KIND_MODEL and config.backend != "python":
            raise ModelConfigError(f"{source}: instance_group kind KIND_MODEL is not supported")
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


def _validate_ios(ios: Iterable[Any], field: str, config: mc.ModelConfig, source: str) -> None:
    seen: set[str] = set()
    for io in ios:
        label = f"{field} '{io.name}'"
        if not io.name:
            raise ModelConfigError(f"{source}: {field} without a name")
        if not _IO_NAME.match(io.name):
            raise ModelConfigError(f"{source}: {label} has an invalid name")
        if io.name in seen:
            raise ModelConfigError(f"{source}: duplicate {field} name '{io.name}'")
        seen.add(io.name)
        if io.data_type == mc.TYPE_INVALID or io.data_type not in mc.DataType.values():
            raise ModelConfigError(f"{source}: {label} data_type must be set to a valid TYPE_*")
        if len(io.dims) == 0 and not io.HasField("reshape") and config.max_batch_size == 0:
            raise ModelConfigError(f"{source}: {label} dims must be set")
        if any(d < -1 or d == 0 for d in io.dims):
            raise ModelConfigError(
                f"{source}: {label} dims = {list(io.dims)}, each must be -1 or >= 1"
            )
        if io.HasField("reshape") and any(d < -1 for d in io.reshape.shape):
            raise ModelConfigError(
                f"{source}: {label} reshape.shape = {list(io.reshape.shape)}, "
                "each must be -1 or >= 0"
            )
