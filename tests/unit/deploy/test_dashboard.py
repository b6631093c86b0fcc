"""The Grafana dashboard (deploy/grafana/thaw.json) reads the fleet once however many activators
run: every activator attaches every serving pod, so its model-state, replica, cost and scale
series and the nv_* series it relays each describe the whole fleet. Summed over two activators
they read double ("Models warm" 2 for one warm model); the dashboard takes max by model first.
Series that are each activator's own (held requests, its requests and rejections) are summed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "thaw.json"
RULES = DEPLOY / "prometheus" / "thaw-alerts.yaml"

# An activator's view of the whole fleet (activator/observe/metrics.py; nv_* relayed from every
# pod).
FLEET_VIEW = re.compile(
    r"\b(thaw_model_state|thaw_model_replicas|thaw_saved_replica_seconds|thaw_saved_gpu_seconds"
    r"|thaw_peak_replicas|thaw_gpus_per_replica|thaw_replica_seconds_total|thaw_gpu_seconds_total"
    r"|thaw_idle_at_zero_seconds_total|thaw_scale_decisions_total|nv_inference_[a-z_]+)\b"
)
AGGREGATION = re.compile(r"\b(sum|max|min|avg|count)\b\s*(by\s*\([^)]*\))?\s*\(")


def _innermost_aggregation(expr: str, position: int) -> str | None:
    """The aggregation operator whose parentheses most closely enclose `position`."""
    best: tuple[int, str] | None = None
    for match in AGGREGATION.finditer(expr[:position]):
        depth, end = 1, match.end()
        for char in expr[end:position]:
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth == 0:
                break
        else:
            best = (match.start(), match.group(1))
    return best[1] if best else None


def _queries() -> list[tuple[str, str]]:
    doc = json.loads(DASHBOARD.read_text())
    found = [(p["title"], t["expr"]) for p in doc["panels"] for t in p.get("targets", [])]
    rules = yaml.safe_load(RULES.read_text())["groups"]
    found += [(r["alert"], r["expr"]) for g in rules for r in g["rules"]]
    return found


def test_the_checker_sees_a_sum_of_per_activator_gauges() -> None:
    expr = 'sum(thaw_model_state{state="warm"})'
    assert _innermost_aggregation(expr, expr.index("thaw_model_state")) == "sum"
    expr = 'sum(max by (model) (thaw_model_state{state="warm"}))'
    assert _innermost_aggregation(expr, expr.index("thaw_model_state")) == "max"


@pytest.mark.parametrize(("where", "expr"), _queries(), ids=[w for w, _ in _queries()])
def test_fleet_views_are_never_summed_over_activators(where: str, expr: str) -> None:
    for match in FLEET_VIEW.finditer(expr):
        operator = _innermost_aggregation(expr, match.start())
        assert operator in ("max", "min", "avg"), (
            f"{where}: {match.group(1)} is aggregated by {operator!r}: each activator reports the "
            "whole fleet, take max by (model) first"
        )
