"""A shared pod's budget from its runtime container's memory limit (pod_memory)."""

from __future__ import annotations

from typing import Any

import pytest

from activator.scaler.kubernetes.pod_memory import (
    device_room,
    memory_limit,
    parse_quantity,
    shared_budget,
)

GiB = 1 << 30


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8Gi", 8 * GiB),
        ("512Mi", 512 << 20),
        ("1.5Gi", 3 * GiB // 2),
        ("0.5Ki", 512),
        ("1500M", 1_500_000_000),
        ("1e9", 1_000_000_000),
        ("2k", 2000),
        ("100m", 1),  # a thousandth of a byte, rounded up as Kubernetes does
        ("1073741824", GiB),
    ],
)
def test_quantities_kubernetes_accepts_are_read_in_bytes(text: str, expected: int) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("text", ["", "0", "-1Gi", "8GiB", "8 Gi", "Gi", "abc", "1e40", "9" * 80])
def test_anything_else_is_no_limit(text: str) -> None:
    assert parse_quantity(text) is None


def test_only_strings_are_quantities() -> None:
    assert parse_quantity(8 * GiB) is None
    assert parse_quantity(None) is None


def _pod(*containers: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"containers": list(containers)}}


def test_the_runtime_containers_limit_is_the_one_with_the_http_port() -> None:
    sidecar = {"name": "log", "resources": {"limits": {"memory": "64Mi"}}}
    runtime = {
        "name": "runtime",
        "ports": [{"name": "http", "containerPort": 8000}],
        "resources": {"limits": {"memory": "8Gi"}, "requests": {"memory": "2Gi"}},
    }
    assert memory_limit(_pod(sidecar, runtime)) == 8 * GiB
    assert memory_limit(_pod({"resources": {"limits": {"memory": "1Gi"}}})) == GiB  # the first


@pytest.mark.parametrize(
    "pod",
    [
        {},
        _pod(),
        _pod({"name": "runtime"}),
        _pod({"resources": {"requests": {"memory": "2Gi"}}}),  # a request is no limit
        _pod({"resources": {"limits": {"cpu": "2"}}}),
        _pod({"resources": {"limits": {"memory": "lots"}}}),
        _pod({"resources": {"limits": ["8Gi"]}}),
    ],
)
def test_a_pod_without_a_readable_memory_limit_has_none(pod: dict[str, Any]) -> None:
    assert memory_limit(pod) is None


def test_the_budget_is_the_flags_capped_by_the_limit_less_the_runtimes_own() -> None:
    assert shared_budget(2 * GiB, None, 300 << 20) == 2 * GiB  # no limit: the flag's
    assert shared_budget(2 * GiB, 8 * GiB, 300 << 20) == 2 * GiB  # room to spare
    assert shared_budget(64 * GiB, 8 * GiB, GiB) == 7 * GiB
    assert shared_budget(64 * GiB, 8 * GiB, None) == 8 * GiB  # own memory unknown
    assert shared_budget(64 * GiB, GiB, 2 * GiB) == 0  # never below nothing


def test_a_gpu_pods_room_is_its_gpus_memory_less_what_is_used_besides_the_model() -> None:
    GiB = 1 << 30
    # 80 GiB, 12 GiB used: a 10 GiB model just loaded and 2 GiB of context and pools.
    assert device_room(80 * GiB, 12 * GiB, 10 * GiB) == 78 * GiB
    assert device_room(80 * GiB, 1 * GiB, 10 * GiB) == 80 * GiB  # the model not there yet
    assert device_room(8 * GiB, 9 * GiB, 0) == 0  # full already: no room, never negative
    assert device_room(None, None, GiB) is None  # no GPU: no cap
    assert device_room(0, 0, GiB) is None
