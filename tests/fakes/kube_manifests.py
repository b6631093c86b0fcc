"""Small manifest builders for tests against the fake API server (plain dicts, as a client
would send them): a pod running a Python snippet or `thaw serve`, a Deployment of them."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["deployment", "pod", "python_container", "thaw_serve_container"]


def python_container(
    code: str,
    *,
    name: str = "main",
    env: Sequence[Mapping[str, Any]] = (),
    ports: Sequence[int] = (),
    readiness_port: int | None = None,
) -> dict[str, Any]:
    """A container running `python -c code` (the kubelet maps `python` to this interpreter)."""
    container: dict[str, Any] = {
        "name": name,
        "image": "python:3.11",
        "command": ["python", "-c", code],
        "env": [dict(e) for e in env],
        "ports": [{"containerPort": p} for p in ports],
    }
    if readiness_port is not None:
        container["readinessProbe"] = {"tcpSocket": {"port": readiness_port}, "periodSeconds": 1}
    return container


def thaw_serve_container(
    repo_mount: str = "/models", *, port: int = 8000, extra_args: Sequence[str] = ()
) -> dict[str, Any]:
    """`thaw serve <repo> --host $(POD_IP) --port <port> --model-control-mode explicit`, with
    POD_IP from the downward API and a readiness probe on /v2/health/ready."""
    return {
        "name": "runtime",
        "image": "ghcr.io/thaw/runtime:dev",
        "args": [
            "serve",
            repo_mount,
            "--host",
            "$(POD_IP)",
            "--port",
            str(port),
            "--model-control-mode",
            "explicit",
            *extra_args,
        ],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "http", "containerPort": port}],
        "volumeMounts": [{"name": "models", "mountPath": repo_mount}],
        "readinessProbe": {
            "httpGet": {"path": "/v2/health/ready", "port": "http"},
            "periodSeconds": 1,
        },
    }


def pod(
    name: str,
    container: Mapping[str, Any],
    *,
    labels: Mapping[str, str] | None = None,
    restart_policy: str = "Always",
    grace_s: int = 30,
    volumes: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {
            "containers": [copy.deepcopy(dict(container))],
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": grace_s,
            "volumes": [dict(v) for v in volumes],
        },
    }


def deployment(
    name: str,
    container: Mapping[str, Any],
    *,
    replicas: int,
    labels: Mapping[str, str] | None = None,
    volumes: Sequence[Mapping[str, Any]] = (),
    grace_s: int = 30,
) -> dict[str, Any]:
    labels = dict(labels or {"app": name})
    template = pod(name, container, labels=labels, grace_s=grace_s, volumes=volumes)
    del template["metadata"]["name"], template["apiVersion"], template["kind"]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": template},
    }
