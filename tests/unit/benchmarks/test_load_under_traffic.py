"""benchmarks/load_under_traffic.py's summary: medians and their ratio (the script itself runs a
real `thaw up`, by hand)."""

from __future__ import annotations

import pytest

from benchmarks.load_under_traffic import summary


def test_the_summary_is_the_medians_and_busy_over_idle() -> None:
    result = summary([0.5, 0.4, 0.6], [9.5, 9.4, 9.6])
    assert result == {"idle_s": 0.5, "busy_s": 9.5, "ratio": pytest.approx(19.0)}
