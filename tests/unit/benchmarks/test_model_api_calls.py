"""benchmarks/model_api_calls.py's summary: medians and their ratio (the script itself runs a
real `thaw serve` and `thaw up`, by hand)."""

from __future__ import annotations

import pytest

from benchmarks.model_api_calls import summary


def test_the_summary_is_the_medians_and_up_over_serve() -> None:
    result = summary([280.0, 700.0, 270.0], [1300.0, 2000.0, 1250.0])
    assert result == {"serve_us": 280.0, "up_us": 1300.0, "ratio": pytest.approx(1300 / 280)}
