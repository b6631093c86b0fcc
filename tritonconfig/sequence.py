"""A stateful model's `sequence_batching`: control inputs and idle timeout, checked Triton's way.

A sequence model receives, besides its own inputs, control tensors the server fills in for
each request: START (first request of a sequence), END (last), READY (this batch slot holds a
request) and CORRID (the sequence's correlation id). `sequence_controls` reads how the config
spells each (tensor name, datatype, false/true values); the checks and their texts are
Triton's (core `ValidateModelConfig`, `GetBooleanSequenceControlProperties`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from tritonconfig.errors import ModelConfigError
from tritonconfig.schema import mc

__all__ = [
    "SEQUENCE_IDLE_DEFAULT_US",
    "ControlKind",
    "SequenceControl",
    "is_sequence_model",
    "sequence_controls",
    "sequence_idle_us",
    "validate_sequence_batching",
]

# Triton's `max_sequence_idle_microseconds` when the config leaves it 0 (one second).
SEQUENCE_IDLE_DEFAULT_US = 1_000_000

_CORRID_TYPES = ("TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32", "TYPE_STRING")


class ControlKind(StrEnum):
    """The control signals Triton's sequence batcher sends a model."""

    START = "CONTROL_SEQUENCE_START"
    READY = "CONTROL_SEQUENCE_READY"
    END = "CONTROL_SEQUENCE_END"
    CORRID = "CONTROL_SEQUENCE_CORRID"


@dataclass(frozen=True)
class SequenceControl:
    """One control input: tensor `name`, its config datatype (`TYPE_FP32`, ...) and, for the
    boolean kinds, the (false, true) values to write."""

    kind: ControlKind
    name: str
    data_type: str
    false_true: tuple[float | int | bool, float | int | bool] | None


def is_sequence_model(config: mc.ModelConfig) -> bool:
    return config.HasField("sequence_batching")


def sequence_idle_us(config: mc.ModelConfig) -> int | None:
    """How long a sequence may go without a request before it is released (microseconds);
    None for a model without sequence batching."""
    if not is_sequence_model(config):
        return None
    return config.sequence_batching.max_sequence_idle_microseconds or SEQUENCE_IDLE_DEFAULT_US


def sequence_controls(config: mc.ModelConfig) -> dict[ControlKind, SequenceControl]:
    """The control inputs a sequence model declares, by kind (assumes a validated config)."""
    controls: dict[ControlKind, SequenceControl] = {}
    for control_input in config.sequence_batching.control_input:
        for control in control_input.control:
            kind = ControlKind(mc.ModelSequenceBatching.Control.Kind.Name(control.kind))
            controls[kind] = _control(kind, control_input.name, control)
    return controls


def _control(kind: ControlKind, name: str, control: object) -> SequenceControl:
    if kind == ControlKind.CORRID:
        data_type = mc.DataType.Name(control.data_type)  # type: ignore[attr-defined]
        return SequenceControl(kind, name, data_type, None)
    for field, data_type in (
        ("int32_false_true", "TYPE_INT32"),
        ("fp32_false_true", "TYPE_FP32"),
        ("bool_false_true", "TYPE_BOOL"),
    ):
        values = list(getattr(control, field))
        if values:
            return SequenceControl(kind, name, data_type, (values[0], values[1]))
    return SequenceControl(kind, name, "TYPE_INVALID", None)


def validate_sequence_batching(config: mc.ModelConfig, source: str) -> None:
    """ModelConfigError for the first thing Triton refuses in `sequence_batching`."""
    if not is_sequence_model(config):
        return
    name = config.name
    if config.response_cache.enable:
        raise ModelConfigError(
            f"{source}: Response Cache does not currently support model {name} with sequence "
            "batching scheduler. Please disable the response cache."
        )
    batching = config.sequence_batching
    seen: set[str] = set()
    tensors: set[str] = set()
    for control_input in batching.control_input:
        if not control_input.name:
            raise ModelConfigError(
                f"{source}: sequence batching control tensor must have a name for {name}"
            )
        if len(control_input.control) > 1 or control_input.name in tensors:
            raise ModelConfigError(
                f"{source}: sequence batching control tensor '{control_input.name}' is "
                f"specified for multiple control kinds for {name}"
            )
        tensors.add(control_input.name)
        for control in control_input.control:
            kind = mc.ModelSequenceBatching.Control.Kind.Name(control.kind)
            if kind in seen:
                raise ModelConfigError(
                    f"{source}: sequence batching specifies multiple {kind} tensors for {name}"
                )
            seen.add(kind)
            _check_control(kind, control, name, source)
    if batching.HasField("oldest"):
        for size in batching.oldest.preferred_batch_size:
            if size <= 0:
                raise ModelConfigError(
                    f"{source}: sequence batching preferred batch size must be positive for {name}"
                )
            if size > config.max_batch_size:
                raise ModelConfigError(
                    f"{source}: sequence batching preferred batch size must be <= max batch "
                    f"size for {name}"
                )
    utilization = batching.direct.minimum_slot_utilization
    if batching.HasField("direct") and not 0.0 <= utilization <= 1.0:
        raise ModelConfigError(
            f"{source}: sequence batching minimum slot utilization must be in range (0.0, 1.0] "
            f"for {name}"
        )


def _check_control(kind: str, control: object, name: str, source: str) -> None:
    if kind == ControlKind.CORRID:
        data_type = mc.DataType.Name(control.data_type)  # type: ignore[attr-defined]
        if data_type not in _CORRID_TYPES:
            raise ModelConfigError(
                f"{source}: unexpected data type for control {kind} for {name}. Allowed data "
                "types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING"
            )
        return
    given = [
        field
        for field in ("int32_false_true", "fp32_false_true", "bool_false_true")
        if len(getattr(control, field))
    ]
    if not given:
        raise ModelConfigError(
            f"{source}: sequence batching must specify either 'int32_false_true', "
            f"'fp32_false_true' or 'bool_false_true' for {kind} for {name}"
        )
    if len(given) > 1:
        raise ModelConfigError(
            f"{source}: sequence batching specifies more than one from 'int32_false_true', "
            f"'fp32_false_true' and 'bool_false_true' for {kind} for {name}"
        )
    if len(getattr(control, given[0])) != 2:
        raise ModelConfigError(
            f"{source}: sequence batching control '{given[0]}' must have exactly 2 entries for "
            f"{kind} for {name}"
        )
