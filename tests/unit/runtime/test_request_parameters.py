"""Scheduling parameters of a request, read Triton's way: uint64s, booleans, ids."""

from __future__ import annotations

import pytest

from runtime.errors import InvalidInput
from runtime.scheduling.request_parameters import SchedulingParameters, scheduling_parameters


def test_absent_parameters_ask_nothing() -> None:
    assert scheduling_parameters({}) == SchedulingParameters()
    assert scheduling_parameters({"custom": "x"}) == SchedulingParameters()


def test_values_within_range_are_read() -> None:
    params = scheduling_parameters(
        {"priority": 2, "timeout": 2**64 - 1, "sequence_id": "abc", "sequence_start": True}
    )
    assert params.priority == 2 and params.timeout_us == 2**64 - 1
    assert params.sequence_id == "abc" and params.sequence_start and not params.sequence_end
    assert params.in_sequence
    assert not scheduling_parameters({"sequence_id": 0}).in_sequence


@pytest.mark.parametrize(
    ("parameters", "fragment"),
    [
        ({"priority": -1}, "'priority'"),
        ({"priority": 1.0}, "'priority'"),
        ({"priority": False}, "'priority'"),
        ({"timeout": 2**64}, "'timeout'"),
        ({"timeout": "10"}, "'timeout'"),
        ({"sequence_id": 1.5}, "'sequence_id'"),
        ({"sequence_id": None}, None),
        ({"sequence_start": 1}, "'sequence_start'"),
        ({"sequence_end": "true"}, "'sequence_end'"),
    ],
)
def test_values_of_the_wrong_type_are_the_clients_error(
    parameters: dict,
    fragment: str | None,  # type: ignore[type-arg]
) -> None:
    if fragment is None:
        assert not scheduling_parameters(parameters).in_sequence
        return
    with pytest.raises(InvalidInput, match=f"Unable to parse {fragment}"):
        scheduling_parameters(parameters)


def test_a_huge_value_is_named_without_printing_it() -> None:
    with pytest.raises(InvalidInput) as raised:
        scheduling_parameters({"priority": 10**5000})
    assert "an integer of" in raised.value.message and len(raised.value.message) < 200
