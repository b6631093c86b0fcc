"""Every query of the Grafana dashboard and of the alert rules names only metrics Thaw exports.

The names are collected from a running `thaw up` (the activator's /metrics) and from one of its
replicas (`thaw serve`'s /metrics, Triton's nv_* families), after a model was woken from its
snapshot image and served a request, so that the list is what Prometheus would scrape, not a
list written by hand. The repository holds a Python model beside it (never woken), as most do:
its pool processes then keep spare stubs, and their families are on the replica's /metrics.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures.models import make_add_sub
from tests.fixtures.onnx_models import make_onnx_add
from tests.fixtures.promql import exposed_names, metric_names
from tests.fixtures.up_process import UpProcess

pytestmark = pytest.mark.integration

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "thaw.json"
RULES = DEPLOY / "prometheus" / "thaw-alerts.yaml"


def _text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return str(resp.read().decode())


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, set[str]]]:
    repo = tmp_path_factory.mktemp("dashboard_repo")
    make_onnx_add(repo)
    make_add_sub(repo)  # a Python model: the pool processes keep a spare stub for it
    cache = repo.parent / "dashboard_cache"
    up = UpProcess(
        repo, "--warm-pool", "1", "--preload-frameworks", "onnxruntime", "--cache", str(cache)
    )
    try:
        up.wait_for(
            lambda: up.get("/thaw/status")["image_builds"].get("onnx_add") == "built", 120, "image"
        )
        body = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
                            "data": [1, 2, 3, 4]}]}  # fmt: skip
        request = urllib.request.Request(
            up.url + "/v2/models/onnx_add/infer", data=json.dumps(body).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=60) as resp:
            assert resp.status == 200
        replica = up.model("onnx_add")["replicas"][0]["url"]
        yield {"activator": exposed_names(up.metrics()), "replica": exposed_names(
            _text(replica + "/metrics"))}  # fmt: skip
    finally:
        up.stop()


def _dashboard_queries() -> Iterator[tuple[str, str]]:
    doc = json.loads(DASHBOARD.read_text())
    for panel in doc["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]
    for variable in doc["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            found = re.fullmatch(r"label_values\((.+),\s*\w+\)", query["query"].strip())
            assert found, f"variable {variable['name']}: {query['query']!r}"
            yield f"variable ${variable['name']}", found.group(1)


def _missing(queries: Iterator[tuple[str, str]], known: set[str]) -> list[str]:
    wrong = []
    for where, expr in queries:
        names = metric_names(expr)
        if not names:
            wrong.append(f"{where}: {expr!r} names no metric")
        wrong += [f"{where}: {name}" for name in sorted(names - known)]
    return wrong


def test_the_metric_names_are_collected_from_both_servers(exported: dict[str, set[str]]) -> None:
    assert "thaw_replica_seconds_total" in exported["activator"]
    assert "thaw_cold_start_seconds_bucket" in exported["activator"]
    assert "nv_inference_request_success" in exported["replica"]
    assert "thaw_model_loads_total" in exported["replica"]
    assert "thaw_python_spare_stub_misses_total" in exported["replica"]


def test_every_dashboard_panel_names_only_exported_metrics(exported: dict[str, set[str]]) -> None:
    known = exported["activator"] | exported["replica"]
    assert _missing(_dashboard_queries(), known) == []
    used = {n for _, expr in _dashboard_queries() for n in metric_names(expr)}
    # It covers both servers: the activator's thaw_* and the replicas' Triton nv_* families.
    assert len(used & exported["activator"]) >= 10 and len(used & exported["replica"]) >= 8


def test_every_alert_rule_names_only_exported_metrics(exported: dict[str, set[str]]) -> None:
    known = exported["activator"] | exported["replica"]
    rules: list[dict[str, Any]] = [
        r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]
    ]
    assert _missing(((r["alert"], r["expr"]) for r in rules), known) == []
