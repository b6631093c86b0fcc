"""The Helm chart (deploy/helm/thaw): `helm lint` clean; rendered for CPU, GPU, and a ConfigMap,
PVC or S3 model repository, and for every values file the docs show (deploy/helm/thaw/examples),
every object valid against the Kubernetes 1.33 and 1.35 schemas (kubernetes-validate, strict);
and what each object must say: active-active activators with a PDB, health probes and zone
spread, the GPU pool's requests and toleration, RBAC with exactly the verbs the backend uses,
NetworkPolicies, scrape annotations, the models ConfigMap the activator reads. Placement, the
schema, exposure and the admission policies have their own modules (test_chart_*.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from activator.config import ScaleSettings
from activator.fleet.model_settings import apply_model_settings, read_model_settings
from activator.fleet.repository import Repository
from activator.scaler.kubernetes.api import REQUIRED_ACCESS
from tests.fixtures.models import make_add_sub
from tests.unit.deploy.chart_paths import CHART, Render, as_mounted

K8S_VERSIONS = ("1.33.0", "1.35.0")  # the oldest the chart supports, the cluster's default
K8S_VERSION = K8S_VERSIONS[0]
# Prometheus Operator kinds: no schema in kubernetes-validate (CRDs); test_chart_monitoring.py
# checks what they say.
CRD_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
EXAMPLES = sorted((CHART / "examples").glob("*.yaml"))
STORE = {"images": {"storeUri": "s3://bucket/images/", "region": "us-east-1"}}
GPU_POOL = {
    "replicas": 0,
    "gpu": 2,
    "nodeSelector": {"nvidia.com/gpu.present": "true"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
}

VALUE_SETS: dict[str, dict[str, Any]] = {
    "cpu-configmap": {
        "modelRepository": {"source": "configMap", "configMapName": "repo"},
        **STORE,
        "models": [{"name": "resnet50"}],
    },
    "gpu-pvc": {
        "modelRepository": {"source": "pvc", "pvcName": "models"},
        "runtime": {"pools": {"default": {"replicas": 1}, "gpu": GPU_POOL}, "arenaBytes": 1 << 30},
        **STORE,
        "models": [{"name": "resnet50", "gpu": 2, "placementClass": "gpu"}, {"name": "bert"}],
    },
    "s3": {
        "modelRepository": {"source": "s3", "s3Uri": "s3://bucket/repository/"},
        "images": {"storeUri": "s3://bucket/images/", "region": "eu-west-1"},
        "models": [
            {"name": "resnet50", "maxReplicas": 6, "targetConcurrency": 2.5, "hot": True},
            {"name": "bert", "minReplicas": 1},
        ],
    },
    "minimal": {
        "modelRepository": {"source": "pvc", "pvcName": "models"},
        "rbac": {"create": False},
        "networkPolicy": {"enabled": False},
        "nodeCache": {"prefetch": {"enabled": False}},
        "metrics": {"podAnnotations": False},
        "serviceAccount": {"create": False},
        "admissionPolicy": {"enabled": False},
    },
}


def _by_kind(objects: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def _one(objects: list[dict[str, Any]], kind: str, suffix: str = "") -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    return found


def test_helm_lint_is_clean(helm: Path) -> None:
    for example in EXAMPLES:
        done = subprocess.run(
            [str(helm), "lint", str(CHART), "--strict", "-f", str(example)],
            capture_output=True, text=True, timeout=60, env={**os.environ, "HOME": "/tmp"},
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout, done.stdout


def _valid(objects: list[dict[str, Any]]) -> None:
    assert objects
    for obj in objects:
        if obj["kind"] in CRD_KINDS:
            continue
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)
        assert obj["metadata"].get("namespace", "thaw") == "thaw"
    kinds = {o["kind"] for o in objects}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding", "Namespace"}, "no cluster-wide rights"
    # The only cluster-scoped objects: the admission policies, bound to this namespace alone.
    for obj in objects:
        if obj["kind"] == "ValidatingAdmissionPolicyBinding":
            selector = obj["spec"]["matchResources"]["namespaceSelector"]["matchLabels"]
            assert selector == {"kubernetes.io/metadata.name": "thaw"}


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_rendered_object_is_valid_kubernetes(render: Render, name: str) -> None:
    _valid(render(VALUE_SETS[name]))


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_every_values_file_in_the_docs_renders_valid_kubernetes(
    render: Render, example: Path
) -> None:
    _valid(render(yaml.safe_load(example.read_text())))
    docs = (CHART.parents[2] / "docs" / "kubernetes.md").read_text()
    assert f"deploy/helm/thaw/examples/{example.name}" in docs, "the docs show every example"


def test_the_activators_are_active_active_behind_a_pdb_with_health_probes(render: Render) -> None:
    objects = render(VALUE_SETS["cpu-configmap"])
    deployment = _one(objects, "Deployment", "-activator")
    assert deployment["spec"]["replicas"] >= 2
    pdb = _one(objects, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    args = container["args"]
    assert args[:2] == ["up", "/models"] and "--scaler=kubernetes" in args
    pool = _one(objects, "Deployment", "-pool")
    selector = pool["spec"]["selector"]["matchLabels"]
    assert f"--pool-selector={','.join(f'{k}={v}' for k, v in selector.items())}" in args
    assert f"--pool-deployment={pool['metadata']['name']}" in args
    service = _one(objects, "Service")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert (
        annotations["prometheus.io/scrape"] == "true"
        and annotations["prometheus.io/port"] == "8002"  # Triton's metrics port
    )
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    # Spread over zones (a zone lost keeps the others serving) and nodes.
    (spread,) = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "topology.kubernetes.io/zone" and spread["maxSkew"] == 1
    assert spread["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]


def _ports(container: dict[str, Any]) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in container["ports"]}


def _command_line(command: str, args: list[str]) -> Any:
    """A rendered container's args as `thaw <command>` itself parses them."""
    from thaw.cli import build_parser

    return build_parser(command).parse_args(args)


def test_the_activators_serve_grpc_and_metrics_behind_the_service(render: Render) -> None:
    from activator.process.cli import build_config

    objects = render(VALUE_SETS["cpu-configmap"], "activator.service.grpcPort=9001")
    deployment = _one(objects, "Deployment", "-activator")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert _ports(container) == {"http": 8000, "grpc": 8001, "metrics": 8002, "peer": 8008}
    # The flags say the ports outright; `thaw up`'s own parser reads them so.
    config = build_config(_command_line("up", as_mounted(container["args"])))
    assert (config.port, config.grpc_port, config.metrics_port) == (8000, 8001, 8002)
    assert config.scaler.runtime_port == 8000 and config.scaler.runtime_grpc_port == 8001
    # `thaw up` binds loopback unless told: the chart says 0.0.0.0 outright, and leaves the
    # load/unload API off (Triton's `none`) at the activators the Service exposes.
    assert config.host == "0.0.0.0" and not config.model_control
    service = _one(objects, "Service")
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"},
        {"name": "grpc", "port": 9001, "targetPort": "grpc", "protocol": "TCP"},
    ]
    # Probes unchanged: HTTP health on the http port.
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}


def test_runtime_pods_serve_http_grpc_and_metrics_on_named_ports(render: Render) -> None:
    from runtime.process.cli import build_config

    objects = render(VALUE_SETS["cpu-configmap"])
    pool = _one(objects, "Deployment", "-pool")["spec"]["template"]
    (runtime,) = pool["spec"]["containers"]
    assert _ports(runtime) == {"http": 8000, "grpc": 8001, "metrics": 8002}
    config = build_config(_command_line("serve", as_mounted(runtime["args"])))
    assert (config.port, config.grpc_port, config.metrics_port) == (8000, 8001, 8002)
    assert config.allow_grpc and config.allow_metrics and config.host == "$(POD_IP)"
    assert (config.grpc_host, config.metrics_host) == (None, None)  # on --host: the pod IP
    # BLS calls and ensemble steps to other models go to the activators' Service.
    service = _one(objects, "Service")
    address = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    service_ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    assert (
        config.front_door
        == config.ensemble_steps_url
        == (f"http://{address}:{service_ports['http']}")
    )
    assert config.front_door_grpc == f"{address}:{service_ports['grpc']}"
    assert config.handoff_socket is None
    annotations = pool["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == "8002" and annotations["prometheus.io/path"] == (
        "/metrics"
    )
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert runtime[probe]["httpGet"]["port"] == "http"
    # Other port values go everywhere they are used: the pod, its args, the activators' flags.
    moved = render(VALUE_SETS["cpu-configmap"], "runtime.grpcPort=9101", "runtime.metricsPort=9102")
    (runtime,) = _one(moved, "Deployment", "-pool")["spec"]["template"]["spec"]["containers"]
    assert _ports(runtime) == {"http": 8000, "grpc": 9101, "metrics": 9102}
    assert {"--grpc-port=9101", "--metrics-port=9102"} <= set(runtime["args"])
    (activator,) = _one(moved, "Deployment", "-activator")["spec"]["template"]["spec"]["containers"]
    assert "--runtime-grpc-port=9101" in activator["args"]


def test_warm_pods_start_a_python_stub_ahead_unless_told_not_to(render: Render) -> None:
    from runtime.process.cli import build_config

    torch = "runtime.pythonSpareStubImports={torch,transformers.models}"
    # auto: read from the repository's Python models by each warm pod (the count and imports)
    for sets, spares, imports, auto in (
        ((), (0, True), (), (True,)),
        (("runtime.pythonSpareStubs=1", "runtime.pythonSpareStubImports=null"), (1, False), (), ()),
        (("runtime.pythonSpareStubs=3", torch), (3, False), ("torch", "transformers.models"), ()),
        (("runtime.pythonSpareStubs=0",), (0, False), (), ()),
    ):
        objects = render(VALUE_SETS["cpu-configmap"], *sets)
        (runtime,) = _one(objects, "Deployment", "-pool")["spec"]["template"]["spec"]["containers"]
        config = build_config(_command_line("serve", as_mounted(runtime["args"])))
        got = (config.python_spare_stubs, config.python_spare_stubs_auto)
        assert got == spares, runtime["args"]
        assert config.python_spare_stub_imports == imports, runtime["args"]
        assert config.python_spare_stub_imports_auto is bool(auto), runtime["args"]
        started = any(a.startswith("--python-spare-stubs=") for a in runtime["args"])
        assert started == (spares != (0, False)), runtime["args"]


def test_gpu_pods_request_gpus_and_tolerate_the_gpu_taint(render: Render) -> None:
    objects = render(VALUE_SETS["gpu-pvc"])
    pool = _one(objects, "Deployment", "-pool-gpu")["spec"]["template"]["spec"]
    (runtime,) = pool["containers"]
    assert runtime["resources"]["requests"]["nvidia.com/gpu"] == 2
    assert runtime["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert runtime["image"].startswith("ghcr.io/thaw-serve/thaw-cuda:")
    assert "--target=cuda" in runtime["args"] and f"--arena-bytes={1 << 30}" in runtime["args"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pool[
        "tolerations"
    ]
    assert pool["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    models = [v for v in pool["volumes"] if v["name"] == "models"]
    assert models == [
        {"name": "models", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}}
    ]
    cpu_pool = _one(objects, "Deployment", "-pool")["spec"]["template"]
    assert "nvidia.com/gpu" not in json.dumps(cpu_pool)
    assert _one(objects, "Deployment", "-pool-gpu")["spec"]["replicas"] == 0


def test_the_role_grants_exactly_what_the_backend_uses_in_its_namespace(render: Render) -> None:
    role = _one(render(VALUE_SETS["cpu-configmap"]), "Role")
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"]}  # fmt: skip
    used = {(g, r, v) for g, r, verbs in REQUIRED_ACCESS for v in verbs}
    assert granted == used
    binding = _one(render(VALUE_SETS["cpu-configmap"]), "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "thaw", "namespace": "thaw"}]
    assert not [o for o in render(VALUE_SETS["minimal"]) if o["kind"] in ("Role", "RoleBinding")]


def test_terraforms_activator_role_grants_the_same_verbs() -> None:
    """infra/terraform/modules/identity's optional Role (create_activator_rbac) matches the
    chart's, so either may be the one that grants them."""
    from tests.fixtures.terraform_tree import module

    role = module("modules/identity").resources()[("kubernetes_role_v1", "activator")]
    granted = {(g, r, v) for rule in role["rule"] for g in rule["api_groups"]
               for r in rule["resources"] for v in rule["verbs"]}  # fmt: skip
    assert granted == {(g, r, v) for g, r, verbs in REQUIRED_ACCESS for v in verbs}


def test_only_activators_reach_runtime_pods(render: Render) -> None:
    objects = render(VALUE_SETS["cpu-configmap"])
    policy = _one(objects, "NetworkPolicy", "-runtime")
    pool = _one(objects, "Deployment", "-pool")
    activator = _one(objects, "Deployment", "-activator")
    labels = pool["spec"]["template"]["metadata"]["labels"]
    selected = policy["spec"]["podSelector"]["matchLabels"]
    assert selected.items() <= labels.items() and "thaw.dev/pool" not in selected  # claimed too
    (rule,) = policy["spec"]["ingress"]
    (peer,) = rule["from"]
    assert peer["podSelector"]["matchLabels"] == activator["spec"]["selector"]["matchLabels"]
    # HTTP (proxied requests, model control) and gRPC (forwarded calls); no scraper is named.
    assert rule["ports"] == [{"protocol": "TCP", "port": 8000}, {"protocol": "TCP", "port": 8001}]
    front = _one(objects, "NetworkPolicy", "-activator")
    open_port, peer_port = front["spec"]["ingress"]
    assert "from" not in open_port and open_port["ports"] == [
        {"protocol": "TCP", "port": port} for port in (8000, 8001, 8002)
    ]
    assert peer_port["ports"] == [{"protocol": "TCP", "port": 8008}]
    assert not [o for o in render(VALUE_SETS["minimal"]) if o["kind"] == "NetworkPolicy"]


def test_scrapers_named_in_metrics_from_reach_only_the_runtimes_metrics_port(
    render: Render,
) -> None:
    scraper = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    objects = render({**VALUE_SETS["cpu-configmap"], "networkPolicy": {"metricsFrom": [scraper]}})
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    activators, scrapers = _one(objects, "NetworkPolicy", "-runtime")["spec"]["ingress"]
    assert scraper not in activators["from"]  # never the model-control API
    assert scrapers == {"from": [scraper], "ports": [{"protocol": "TCP", "port": 8002}]}


def test_the_models_configmap_is_what_the_activator_reads(render: Render, tmp_path: Path) -> None:
    objects = render(VALUE_SETS["s3"])
    data = _one(objects, "ConfigMap", "-models")["data"]["models.json"]
    path = tmp_path / "models.json"
    path.write_text(data)
    overrides = read_model_settings(path)
    # Only the fields an entry sets override its config.pbtxt (Helm replaces the list).
    assert overrides == {
        "resnet50": {
            "thaw.max_replicas": "6",
            "thaw.target_concurrency": "2.5",
            "thaw.hot": "true",
        },
        "bert": {"thaw.min_replicas": "1"},
    }
    # An entry with a name only overrides nothing: its config.pbtxt decides.
    assert read_model_settings_from(render(VALUE_SETS["cpu-configmap"]), tmp_path) == {
        "resnet50": {}
    }
    repo = tmp_path / "repo"
    make_add_sub(repo, "resnet50")
    updated, unknown = apply_model_settings(
        Repository.scan(repo, ScaleSettings()), overrides, source=path
    )
    assert updated.get("resnet50").settings.max_replicas == 6 and unknown == ["bert"]
    # The s3 repository is copied in by an init container; the cache DaemonSet prefetches.
    activator = _one(objects, "Deployment", "-activator")["spec"]["template"]["spec"]
    (init,) = activator["initContainers"]
    # Bounded: in time (timeout), and in size (the emptyDir's sizeLimit).
    assert init["command"][:5] == ["timeout", "600s", "aws", "s3", "sync"]
    assert "s3://bucket/repository/" in init["command"]
    (models_volume,) = [v for v in activator["volumes"] if v["name"] == "models"]
    assert models_volume == {"name": "models", "emptyDir": {"sizeLimit": "4Gi"}}
    daemon = _one(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    assert (
        daemon["args"][:2] == ["prefetch", "/models"]
        and "--store=s3://bucket/images/" in daemon["args"]
    )


def read_model_settings_from(objects: list[dict[str, Any]], tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "defaults.json"
    path.write_text(_one(objects, "ConfigMap", "-models")["data"]["models.json"])
    return read_model_settings(path)


@pytest.mark.parametrize(
    ("sets", "words"),
    [
        # values.schema.json catches types and ranges first, naming the value.
        (["activator.replicas=1"], "at '/activator/replicas': minimum: got 1, want 2"),
        (
            ["modelRepository.source=s3", "modelRepository.s3Uri=http://x"],
            "must be s3://bucket/prefix",
        ),
        (
            ["modelRepository.source=pvc", "modelRepository.pvcName="],
            "needs modelRepository.pvcName",
        ),
        (["models[0].name=../etc"], "is not a model name"),
        (["runtime.grpcPort=8000"], "= [8000 8000 8002], must be three different ports"),
        (["runtime.metricsPort=8001"], "= [8000 8001 8001], must be three different ports"),
        (["images.storeUri=http://bucket/x"], "must be s3://bucket/prefix"),
        (["images.storeUri=s3://My_Bucket/x"], "an S3 bucket name: 3-63 lowercase letters"),
        (["image.digest=latest"], "at '/image/digest': 'latest' does not match pattern"),
        (["imageGpu.digest=sha256:abc"], "at '/imageGpu/digest'"),
        (["image.tag=bad tag"], 'image.tag = "bad tag", must be an image tag'),
        (["runtime.pythonSpareStubs=9"], "at '/runtime/pythonSpareStubs'"),
        (["runtime.pythonSpareStubs=many"], "at '/runtime/pythonSpareStubs'"),
        (["runtime.pythonSpareStubImports={os;rm}"], "at '/runtime/pythonSpareStubImports/0'"),
        (["runtime.pythonSpareStubImports={auto,torch}"], "at '/runtime/pythonSpareStubImports'"),
    ],
)
def test_bad_values_fail_the_render_in_words(render: Render, sets: list[str], words: str) -> None:
    done = render(VALUE_SETS["cpu-configmap"], *sets, check=False)
    assert done.returncode != 0 and words in done.stderr, done.stderr


def test_values_yaml_documents_the_contract_sections() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert {"image", "imageGpu", "serviceAccount", "activator", "runtime", "modelRepository",
            "images", "nodeCache", "models", "metrics", "networkPolicy"} <= set(values)  # fmt: skip
    # The cost of a warm GPU pod is said where the value is set.
    text = (CHART / "values.yaml").read_text()
    assert "a warm GPU pod is a GPU-hour per hour" in text
