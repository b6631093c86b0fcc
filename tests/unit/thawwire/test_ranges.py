"""thawserver.ranges: the one range check, its phrasing and its edges."""

from __future__ import annotations

import math

import pytest

from thawserver.ranges import number, out_of_range


@pytest.mark.parametrize("value", [1, 1.0, 3600, 6.0, 2.5])
def test_inside_the_bounds_is_none(value: float) -> None:
    assert out_of_range("--x", value, 1, 3600) is None


@pytest.mark.parametrize(
    ("value", "shown"),
    [(0, "0"), (3601, "3601"), (0.5, "0.5"), (1e7, "10000000"), (-2.0, "-2")],
)
def test_outside_says_the_value_and_the_bounds(value: float, shown: str) -> None:
    assert out_of_range("--x", value, 1, 3600) == f"`--x` = {shown}, must be in [1, 3600]"


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_not_finite_is_never_in_range(value: float) -> None:
    message = out_of_range("thaw.window_s", value, -math.inf, math.inf)
    assert message is not None and message.startswith("`thaw.window_s` = ")


def test_numbers_print_without_noise() -> None:
    assert [number(v) for v in (5, 5.0, 0.25, 1e20, math.inf)] == ["5", "5", "0.25", "1e+20", "inf"]
