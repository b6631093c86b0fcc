"""A bare `helm install` fails fast, saying what to set; values.schema.json refuses wrong types,
ranges and unknown keys before any template runs; and the two defects an independent cluster
found are refused at render time: a prefetch DaemonSet without an image store (it crash-looped on
`required: --store`) and a ConfigMap repository the chart does not create (the pods never became
ready)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.unit.deploy.chart_paths import CHART, Render

REPO = {"modelRepository": {"source": "pvc", "pvcName": "models"}}
STORE = {"images": {"storeUri": "s3://bucket/images/"}}


def test_a_bare_install_fails_saying_what_to_set(helm: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [str(helm), "install", "thaw", str(CHART), "--dry-run", "--namespace", "thaw"],
        capture_output=True, text=True, timeout=60, check=False,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode != 0
    message = done.stderr
    assert "Thaw needs values it has no default for; set modelRepository.source" in message
    assert "images.storeUri" in message and "nodeCache.prefetch.enabled=false" in message
    assert 'docs/kubernetes.md, "Install"' in message


def test_setting_what_it_asks_for_is_enough(render: Render) -> None:
    assert render({**REPO, **STORE})


def test_prefetch_without_a_store_is_refused_not_crash_looping(render: Render) -> None:
    done = render(REPO, check=False)
    assert done.returncode != 0
    assert "images.storeUri (s3://bucket/prefix of the snapshot images" in done.stderr
    # Without the prefetcher, no store is needed: nothing is rendered that would loop.
    objects = render({**REPO, "nodeCache": {"prefetch": {"enabled": False}}})
    assert not [o for o in objects if o["kind"] == "DaemonSet"]
    # With a store, every prefetcher is told it.
    for daemon in [o for o in render({**REPO, **STORE}) if o["kind"] == "DaemonSet"]:
        (container,) = daemon["spec"]["template"]["spec"]["containers"]
        assert "--store=s3://bucket/images/" in container["args"]


def test_a_configmap_repository_must_be_named_because_the_chart_does_not_create_it(
    render: Render,
) -> None:
    done = render({"modelRepository": {"source": "configMap"}, **STORE}, check=False)
    assert done.returncode != 0
    assert "modelRepository.source = configMap needs modelRepository.configMapName" in done.stderr
    assert "the chart does not create that ConfigMap" in done.stderr
    objects = render({"modelRepository": {"source": "configMap", "configMapName": "repo"}, **STORE})
    volumes = [
        v
        for o in objects
        if o["kind"] in ("Deployment", "DaemonSet")
        for v in o["spec"]["template"]["spec"]["volumes"]
        if v["name"] == "models"
    ]
    assert volumes and all(v["configMap"]["name"] == "repo" for v in volumes)


@pytest.mark.parametrize(
    ("values", "where"),
    [
        (
            {"runtime": {"pools": {"default": {"replicas": "one"}}}},
            "/runtime/pools/default/replicas",
        ),
        ({"runtime": {"pools": {"gpu": {"gpu": 9}}}}, "/runtime/pools/gpu/gpu"),
        ({"models": [{"name": "m", "maxReplicas": 0}]}, "/models/0/maxReplicas"),
        ({"models": [{"name": "m", "color": "red"}]}, "additional properties 'color' not allowed"),
        ({"modelRepository": {"source": "git"}}, "/modelRepository/source"),
        ({"imageGpu": {"pullPolicy": "Sometimes"}}, "/imageGpu/pullPolicy"),
        ({"activator": {"service": {"type": "ExternalName"}}}, "/activator/service/type"),
        ({"runtimePools": {}}, "additional properties 'runtimePools' not allowed"),
        ({"auth": {"apis": ["everything"]}}, "/auth/apis/0"),
    ],
)
def test_the_schema_refuses_wrong_values_naming_them(
    render: Render, values: dict[str, object], where: str
) -> None:
    merged = {**REPO, **STORE, **values}
    done = render(merged, check=False)
    assert done.returncode != 0 and "don't meet the specifications of the schema" in done.stderr
    assert where in done.stderr, done.stderr


def test_the_schema_knows_every_default_value() -> None:
    import yaml

    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(value: object, node: dict[str, object], path: str) -> None:
        if isinstance(value, dict) and node.get("type") == "object":
            props = node.get("properties", {})
            extra = node.get("additionalProperties", True)
            assert isinstance(props, dict)
            for key, item in value.items():
                if key in props:
                    walk(item, props[key], f"{path}.{key}")
                else:
                    assert extra is not False, f"{path}.{key} is not in values.schema.json"
                    if isinstance(extra, dict):
                        walk(item, extra, f"{path}.{key}")

    walk(values, schema, "")
