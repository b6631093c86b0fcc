"""The scheduling parameters of an infer request (priority, timeout, sequence), read Triton's way.

Triton's HTTP front end reads these request `parameters` for every model, whatever its
scheduler: `priority` and `timeout` (microseconds) must be unsigned 64-bit integers,
`sequence_start` / `sequence_end` booleans, and `sequence_id` an unsigned integer or a string
(0 and "" mean "no sequence"). Anything else is the client's error, in Triton's words. Which of
them a model then uses is its scheduler's business (runtime.scheduling.queue_policy,
runtime.scheduling.sequence_*).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runtime.errors import InvalidInput
from runtime.inference import REQUEST_FIELDS

__all__ = ["SchedulingParameters", "scheduling_parameters"]

_UINT64_MAX = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class SchedulingParameters:
    """What a request asks of its scheduler; 0 / None / False where it asks nothing."""

    priority: int = 0  # 0: the model's default priority level
    timeout_us: int = 0  # 0: no timeout of its own
    sequence_id: int | str | None = None  # None (or 0 / ""): not part of a sequence
    sequence_start: bool = False
    sequence_end: bool = False

    @property
    def in_sequence(self) -> bool:
        """Whether the request names a sequence (Triton: a non-zero or non-empty id)."""
        return self.sequence_id not in (None, 0, "")


NONE = SchedulingParameters()


def scheduling_parameters(parameters: dict[str, Any]) -> SchedulingParameters:
    """The scheduling parameters in a request's `parameters`; InvalidInput for a bad value."""
    if not parameters or REQUEST_FIELDS.isdisjoint(parameters):
        return NONE
    sequence_id = parameters.get("sequence_id")
    if sequence_id is not None and not (_is_uint64(sequence_id) or isinstance(sequence_id, str)):
        raise InvalidInput(
            "Unable to parse 'sequence_id': attempt to access JSON non-string as string"
        )
    return SchedulingParameters(
        priority=_uint64(parameters, "priority"),
        timeout_us=_uint64(parameters, "timeout"),
        sequence_id=sequence_id,
        sequence_start=_bool(parameters, "sequence_start"),
        sequence_end=_bool(parameters, "sequence_end"),
    )


def _is_uint64(value: Any) -> bool:
    # bool is an int in Python, but JSON true is no integer.
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _UINT64_MAX


def _uint64(parameters: dict[str, Any], name: str) -> int:
    value = parameters.get(name, 0)
    if not _is_uint64(value):
        raise InvalidInput(
            f"Unable to parse '{name}': attempt to access JSON non-unsigned-integer as "
            f"unsigned-integer (got {_shown(value)})"
        )
    return int(value)


def _bool(parameters: dict[str, Any], name: str) -> bool:
    value = parameters.get(name, False)
    if not isinstance(value, bool):
        raise InvalidInput(
            f"Unable to parse '{name}': attempt to access JSON non-boolean as boolean "
            f"(got {_shown(value)})"
        )
    return value


def _shown(value: Any) -> str:
    """A client's value in a message, bounded (a hostile one may be huge)."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value) if isinstance(value, int | float | str | bool) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."
