"""The PromQL name finder the dashboard and alert checks rely on (tests/fixtures/promql.py)."""

from __future__ import annotations

import pytest

from tests.fixtures.promql import exposed_names, metric_names


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("thaw_held_requests", {"thaw_held_requests"}),
        ('sum by (model) (thaw_held_requests{model=~"$model"}) > 0', {"thaw_held_requests"}),
        (
            "histogram_quantile(0.9, sum by (model, le) "
            '(rate(thaw_cold_start_seconds_bucket{phase="total"}[$__rate_interval]))) > 5',
            {"thaw_cold_start_seconds_bucket"},
        ),
        (
            'a_total{x="by (y)"} unless on (model) b_total offset 5m and ignoring(le) c',
            {"a_total", "b_total", "c"},
        ),
        ("deriv(mem_bytes[30m]) > 50 * 1024 and 1e9 < mem_bytes", {"mem_bytes"}),
        ("sum(rate(x[1h:5m])) / scalar(y) or vector(0)", {"x", "y"}),
        ('# a comment names no metric\n1 - a{s="#b"} # nor this', {"a"}),
        ("label_values(thaw_model_state, model)", {"thaw_model_state", "model"}),
    ],
)
def test_names_of_an_expression(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_names_of_an_exposition() -> None:
    text = (
        "# HELP h_seconds a histogram\n# TYPE h_seconds histogram\n"
        "# HELP c_total a counter without samples\n# TYPE c_total counter\n"
        "# TYPE nv_inference_count counter\n"
        'nv_inference_count{model="m",version="1"} 3.0\n'
        "g 1.0\n"
    )
    assert exposed_names(text) == {
        "h_seconds_bucket", "h_seconds_count", "h_seconds_sum", "c_total",
        "nv_inference_count", "g",
    }  # fmt: skip
