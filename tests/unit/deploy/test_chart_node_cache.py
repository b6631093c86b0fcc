"""The node cache in the chart: every pod that mounts the cache hostPath first runs the
`cache-owner` init container, which makes the directory the runtime user's (the kubelet creates a
hostPath root-owned 0755 and fsGroup never applies to one) — as root with exactly CHOWN, FOWNER
and FSETID, nothing else. That it works is proven on pods from the real image:
tests/integration/kubernetes/test_chart_e2e.py (podman mode)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.deploy.chart_paths import Render


def _pods_mounting_the_cache(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    found = {}
    for obj in objects:
        spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        if any("hostPath" in v for v in spec.get("volumes") or []):
            found[obj["metadata"]["name"]] = spec
    return found


@pytest.mark.parametrize(
    "sets",
    [
        ["modelRepository.source=configMap", "modelRepository.configMapName=my-models"],
        ["modelRepository.source=s3", "modelRepository.s3Uri=s3://bucket/repo"],
    ],
    ids=["configMap", "s3"],
)
def test_every_pod_mounting_the_node_cache_first_gives_it_to_the_runtime_user(
    render: Render, sets: list[str]
) -> None:
    objects = render({"images": {"storeUri": "s3://bucket/images"}}, *sets)
    pods = _pods_mounting_the_cache(objects)
    assert sorted(pods) == ["rel-thaw-cache", "rel-thaw-pool"]
    for name, spec in pods.items():
        first, *rest = spec["initContainers"]
        assert first["name"] == "cache-owner", name
        assert first["command"] == [
            "install", "-d", "-o", "10001", "-g", "10001", "-m", "2775", "/var/cache/thaw"
        ]  # fmt: skip
        assert first["volumeMounts"] == [{"name": "cache", "mountPath": "/var/cache/thaw"}]
        security = first["securityContext"]
        assert security["runAsUser"] == 0 and security["runAsNonRoot"] is False
        assert security["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN", "FOWNER", "FSETID"]}
        assert security["allowPrivilegeEscalation"] is False
        assert security["readOnlyRootFilesystem"] is True
        # The s3 repository's sync still runs (after it); nothing else runs as root.
        s3 = "modelRepository.source=s3" in sets
        assert [c["name"] for c in rest] == (["repository"] if s3 else [])
        for container in [*rest, *spec["containers"]]:
            assert (container.get("securityContext") or {}).get("runAsUser") is None, name
        assert spec["securityContext"]["runAsUser"] == 10001


def test_the_cache_owner_follows_the_pods_user(render: Render) -> None:
    values = {"podSecurityContext": {"runAsNonRoot": True, "runAsUser": 20002,
                                     "runAsGroup": 30003, "fsGroup": 30003},
              "modelRepository": {"source": "pvc", "pvcName": "models"},
              "nodeCache": {"prefetch": {"enabled": False}}}  # fmt: skip
    pods = _pods_mounting_the_cache(render(values))
    for spec in pods.values():
        command = spec["initContainers"][0]["command"]
        assert command[2:6] == ["-o", "20002", "-g", "30003"]
