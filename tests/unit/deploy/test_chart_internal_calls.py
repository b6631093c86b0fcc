"""The deployment's token on Kubernetes (thawwire.internal_calls): the chart makes one random
Secret (or names the operator's, `internalCalls.existingSecret`), mounts it read-only in the
activators and in every pool's pods, and gives both the flags that read it and the internal
body cap; both servers' parsers take the rendered args; the schema refuses a cap under 1 KiB."""

from __future__ import annotations

import base64
from typing import Any

from tests.unit.deploy.chart_paths import CHART, Render, as_mounted

VALUES: dict[str, Any] = {
    "modelRepository": {"source": "pvc", "pvcName": "models"},
    "images": {"storeUri": "s3://bucket/images/", "region": "us-east-1"},
    "runtime": {"pools": {"default": {"replicas": 1}, "gpu": {"replicas": 0, "gpu": 1}}},
}


def _containers(objects: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod spec, container) of the activators and of every pool."""
    found = []
    for obj in objects:
        if obj["kind"] == "Deployment":
            spec = obj["spec"]["template"]["spec"]
            found.append((spec, spec["containers"][0]))
    return found


def _token_volume(spec: dict[str, Any], container: dict[str, Any]) -> dict[str, Any]:
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "internal-token"]
    assert mount == {"name": "internal-token", "mountPath": "/etc/thaw-internal", "readOnly": True}
    (volume,) = [v for v in spec["volumes"] if v["name"] == "internal-token"]
    return dict(volume["secret"])


def test_one_random_secret_is_mounted_in_the_activators_and_every_pool(render: Render) -> None:
    from activator.process.cli import build_config as up_config
    from runtime.process.cli import build_config as serve_config
    from thaw.cli import build_parser

    objects = render(VALUES)
    (secret,) = [o for o in objects if o["kind"] == "Secret"]
    assert secret["metadata"]["name"] == "rel-thaw-internal"
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert len(token) == 48 and token.isalnum()
    again = next(o for o in render(VALUES) if o["kind"] == "Secret")
    assert again["data"]["token"] != secret["data"]["token"]  # random (kept by `lookup` live)
    containers = _containers(objects)
    assert len(containers) == 3  # activators, default pool, gpu pool
    for spec, container in containers:
        assert _token_volume(spec, container) == {
            "secretName": "rel-thaw-internal",
            "defaultMode": 0o440,  # group-readable: the pods' fsGroup, not the world
            "items": [{"key": "token", "path": "token"}],
        }
        args = container["args"]
        assert "--internal-token-file=/etc/thaw-internal/token" in args
        assert "--max-internal-body-bytes=4294967296" in args
        parse = build_parser(args[0]).parse_args(as_mounted(args))
        config = up_config(parse) if args[0] == "up" else serve_config(parse)
        assert config.internal_calls is not None
        assert config.internal_calls.max_body_bytes == 4 << 30


def test_an_operators_secret_is_named_and_none_is_made(render: Render) -> None:
    values = {**VALUES, "internalCalls": {"existingSecret": "mine", "maxBodyBytes": 1 << 30}}
    objects = render(values)
    assert not [o for o in objects if o["kind"] == "Secret"]
    for spec, container in _containers(objects):
        assert _token_volume(spec, container)["secretName"] == "mine"
        assert f"--max-internal-body-bytes={1 << 30}" in container["args"]


def test_the_schema_refuses_a_cap_under_a_kibibyte(render: Render) -> None:
    done = render({**VALUES, "internalCalls": {"maxBodyBytes": 10}}, check=False)
    assert done.returncode != 0 and "maxBodyBytes" in done.stderr


def test_the_values_are_documented() -> None:
    docs = (CHART.parents[2] / "docs" / "kubernetes.md").read_text()
    assert "`internalCalls.maxBodyBytes`" in docs and "`internalCalls.existingSecret`" in docs
