"""Metrics.counting: the one place every inference path (REST, OpenAI, gRPC unary and stream)
counts a request's latency by status and its refusals by kind."""

from __future__ import annotations

import pytest

from activator.errors import HeldTimeout, Overloaded
from activator.observe.metrics import Metrics


def _latency_count(metrics: Metrics, model: str, code: str) -> float:
    value = metrics.registry.get_sample_value(
        "thaw_activator_request_duration_seconds_count", {"model": model, "code": code}
    )
    return value or 0.0


def _rejections(metrics: Metrics, model: str, reason: str) -> float:
    value = metrics.registry.get_sample_value(
        "thaw_activator_rejections_total", {"model": model, "reason": reason}
    )
    return value or 0.0


def test_an_answered_request_is_counted_with_the_status_the_handler_set() -> None:
    metrics = Metrics()
    with metrics.counting("m") as count:
        count.code = 200
    assert _latency_count(metrics, "m", "200") == 1
    assert _latency_count(metrics, "m", "500") == 0


def test_a_refusal_raised_through_it_counts_its_status_and_kind_and_still_raises() -> None:
    metrics = Metrics()
    with pytest.raises(HeldTimeout), metrics.counting("m"):
        raise HeldTimeout("held past the activation timeout")
    assert _latency_count(metrics, "m", "504") == 1
    assert _rejections(metrics, "m", "HeldTimeout") == 1


def test_a_refusal_handled_inside_is_counted_when_told() -> None:
    metrics = Metrics()
    with metrics.counting("m") as count:
        count.refused(Overloaded("queue full"))
    assert _latency_count(metrics, "m", "503") == 1
    assert _rejections(metrics, "m", "Overloaded") == 1


def test_a_bug_leaves_as_500_and_is_not_a_refusal() -> None:
    metrics = Metrics()
    with pytest.raises(RuntimeError), metrics.counting("m"):
        raise RuntimeError("bug")
    assert _latency_count(metrics, "m", "500") == 1
    assert _rejections(metrics, "m", "RuntimeError") == 0
