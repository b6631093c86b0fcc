"""The chart's Prometheus Operator objects (metrics.serviceMonitor, metrics.prometheusRule): the
ServiceMonitor finds the activators through a headless Service of their metrics port, the
PodMonitor finds every runtime pod (pooled or claimed) by its metrics port, and the
PrometheusRule carries exactly the rules of deploy/prometheus/thaw-alerts.yaml (one file: the
path there is a link to the chart's copy, which promtool tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.unit.deploy.chart_paths import CHART, Render

VALUES: dict[str, Any] = yaml.safe_load((CHART / "examples" / "gpu-karpenter.yaml").read_text())
RULES = Path(__file__).resolve().parents[3] / "deploy" / "prometheus" / "thaw-alerts.yaml"


def _kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


def test_the_service_monitor_scrapes_each_activator_on_its_metrics_port(render: Render) -> None:
    objects = render(VALUES)
    (monitor,) = _kind(objects, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    services = [
        s for s in _kind(objects, "Service")
        if _matches(monitor["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])
    ]  # fmt: skip
    (service,) = [s for s in services if s["metadata"]["name"].endswith("-metrics")]
    assert service["spec"]["clusterIP"] == "None"  # every activator its own target
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    (activator,) = [
        d for d in _kind(objects, "Deployment") if d["metadata"]["name"].endswith("-activator")
    ]
    pod_labels = activator["spec"]["template"]["metadata"]["labels"]
    assert _matches(service["spec"]["selector"], pod_labels)
    (container,) = activator["spec"]["template"]["spec"]["containers"]
    assert {"name": "metrics", "containerPort": 8002, "protocol": "TCP"} in container["ports"]


def test_the_pod_monitor_scrapes_every_runtime_pod(render: Render) -> None:
    objects = render(VALUES)
    (monitor,) = _kind(objects, "PodMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    pools = [d for d in _kind(objects, "Deployment") if "-pool" in d["metadata"]["name"]]
    assert len(pools) == 3
    for pool in pools:
        labels = dict(pool["spec"]["template"]["metadata"]["labels"])
        labels.pop("thaw.dev/pool")  # a claimed pod loses it, and is still scraped
        assert _matches(selector, labels)
        (container,) = pool["spec"]["template"]["spec"]["containers"]
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        assert endpoint["port"] in {p["name"] for p in container["ports"]}


def test_the_prometheus_rule_is_the_alert_file(render: Render) -> None:
    (rule,) = _kind(render(VALUES), "PrometheusRule")
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]
    assert (
        RULES.is_symlink() and RULES.resolve() == (CHART / "files" / "thaw-alerts.yaml").resolve()
    )
    names = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert "ThawActivatorsDown" in names


def test_off_by_default(render: Render) -> None:
    values = {
        "modelRepository": {"source": "pvc", "pvcName": "m"},
        "images": {"storeUri": "s3://bucket/i/"},
    }
    kinds = {o["kind"] for o in render(values)}
    assert not kinds & {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
