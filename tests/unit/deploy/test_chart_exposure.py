"""Reaching the endpoints from outside the cluster, safely: an Ingress that serves TLS only, and
never an exposure (Ingress, LoadBalancer, NodePort) without the API key the activators check
(`thaw up --http-restricted-api` / `--grpc-restricted-protocol`, Triton's spelling), whose value
comes from a Secret through an environment variable and never appears in the pod spec."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.unit.deploy.chart_paths import CHART, Render

PUBLIC: dict[str, Any] = yaml.safe_load((CHART / "examples" / "public-with-auth.yaml").read_text())
PRIVATE = {
    "modelRepository": {"source": "pvc", "pvcName": "models"},
    "images": {"storeUri": "s3://bucket/images/"},
}


def _activator(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = [
        o
        for o in objects
        if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-activator")
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


@pytest.mark.parametrize(
    "exposure",
    [
        {"ingress": {"enabled": True, "host": "thaw.example.com", "tlsSecretName": "tls"}},
        {"activator": {"service": {"type": "LoadBalancer"}}},
        {"activator": {"service": {"type": "NodePort"}}},
    ],
    ids=["ingress", "load-balancer", "node-port"],
)
def test_no_exposure_without_auth(render: Render, exposure: dict[str, Any]) -> None:
    done = render({**PRIVATE, **exposure}, check=False)
    assert done.returncode != 0
    assert "refusing to expose the activators outside the cluster" in done.stderr
    assert "set auth.enabled=true and auth.existingSecret" in done.stderr


def test_an_ingress_serves_tls_only(render: Render) -> None:
    values = {**PUBLIC, "ingress": {**PUBLIC["ingress"], "tlsSecretName": ""}}
    done = render(values, check=False)
    assert done.returncode != 0 and "the Ingress serves TLS only" in done.stderr
    (ingress,) = [o for o in render(PUBLIC) if o["kind"] == "Ingress"]
    assert ingress["spec"]["tls"] == [
        {"hosts": ["thaw.example.com"], "secretName": "thaw-example-com-tls"}
    ]
    (rule,) = ingress["spec"]["rules"]
    (path,) = rule["http"]["paths"]
    assert path["path"] == "/v2" and path["backend"]["service"]["port"] == {"name": "http"}


def test_auth_needs_its_secret(render: Render) -> None:
    done = render({**PRIVATE, "auth": {"enabled": True}}, check=False)
    assert done.returncode != 0 and "auth.enabled needs auth.existingSecret" in done.stderr


def test_the_activators_check_the_key_from_the_secret(render: Render) -> None:
    container = _activator(render(PUBLIC))
    (env,) = [e for e in container["env"] if e["name"] == "THAW_API_KEY"]
    assert env["valueFrom"] == {"secretKeyRef": {"name": "thaw-api-key", "key": "api-key"}}
    http = [a for a in container["args"] if a.startswith("--http-restricted-api=")]
    grpc = [a for a in container["args"] if a.startswith("--grpc-restricted-protocol=")]
    assert len(http) == len(grpc) == 1
    spec = http[0].split("=", 1)[1]
    assert grpc[0].split("=", 1)[1] == spec
    apis, key_value = spec.split(":", 1)
    # Everything but health: the kubelet's probes carry no key.
    assert "health" not in apis.split(",") and {"inference", "metadata", "model-repository"} <= set(
        apis.split(",")
    )
    assert key_value == "x-thaw-api-key=$(THAW_API_KEY)"  # expanded by the kubelet, not stored
    # Triton's spelling, as thaw serve parses it.
    from thawserver.restricted_protocols import parse_http_restrictions, parse_restrictions

    parse_http_restrictions([spec.replace("$(THAW_API_KEY)", "secret")])
    parse_restrictions([spec.replace("$(THAW_API_KEY)", "secret")])


def test_thaw_up_parses_the_restricted_api_flags(render: Render) -> None:
    from thaw.cli import build_parser

    args = build_parser("up").parse_args(_activator(render(PUBLIC))["args"])
    assert args.http_restricted_api and args.grpc_restricted_protocol


def test_private_by_default(render: Render) -> None:
    objects = render(PRIVATE)
    assert not [o for o in objects if o["kind"] == "Ingress"]
    (service,) = [
        o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == "rel-thaw"
    ]
    assert service["spec"]["type"] == "ClusterIP"
    assert not [a for a in _activator(objects)["args"] if "restricted" in a]
