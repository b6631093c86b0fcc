"""The Helm chart end to end on the fake Kubernetes: `helm template` applied to the fake API
server, every pod run by the test kubelet — as local processes, and (`make test-image`) from the
built image with podman as the chart runs it (uid 10001, read-only root, no capabilities).

One install serves a prefetch (the cache DaemonSet pulls the hot model's image into the node
cache), a cold request (a warm-pool pod claimed, its model's image filled into the node cache from
the S3 store and restored), scale to zero, and a burst from zero over both activators; another
install loses no request while the scaling leader's pod is deleted. The S3 store is a real moto
server; pods get its endpoint and credentials injected as a cluster's webhook would."""

from __future__ import annotations

import asyncio
import base64
import itertools
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from kubernetes_asyncio import client

from activator.scaler.kubernetes.pod_state import LABEL_MODEL, is_ready
from tests.fakes.kube_apiserver import FakeKubeApiServer
from tests.fakes.kube_fixtures import eventually
from tests.fakes.kubelet import LocalKubelet
from tests.fakes.kubelet_fixtures import KUBELET_MODES, KubeletMode
from tests.fixtures.chart_install import apply, endpoints, find_helm, inject_env, render
from tests.fixtures.moto_s3 import moto_env, moto_server
from tests.fixtures.onnx_models import make_onnx_add

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

RELEASE, NS = "e2e", "thaw"
FULLNAME = "e2e-thaw"
CACHE_HOST_PATH = "/mnt/thaw-cache"
REPOSITORY = "e2e-test-repository"  # the test's own ConfigMap, never one the chart makes
MODELS = ("onnx_add", "onnx_hot")
_W = np.random.default_rng(0).standard_normal(4).astype(np.float32)  # make_onnx_add's weight


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    with moto_server() as url:
        yield url


@pytest.fixture(scope="module")
def helm() -> Path:
    found = find_helm()
    if found is None and os.environ.get("CI"):
        pytest.fail("helm is missing: `make tools` installs it")
    if found is None:
        pytest.skip("helm is not installed here: run `make tools`")
    return found


@dataclass
class Install:
    """One installed release: its objects, the node's cache directory and the kubelet."""

    objects: list[dict[str, Any]]
    kinds: list[str]
    cache: Path
    kubelet: LocalKubelet
    server: FakeKubeApiServer
    seconds_to_ready: float

    @property
    def service(self) -> dict[str, Any]:
        return next(o for o in self.objects if o["kind"] == "Service")

    def activators(self) -> list[str]:
        return endpoints(self.server, self.service, 8000)

    def pods(self, **labels: str) -> list[dict[str, Any]]:
        return [
            p
            for p in self.server.objects("pods", NS)
            if all((p["metadata"].get("labels") or {}).get(k) == v for k, v in labels.items())
        ]

    def images(self, model: str) -> list[Path]:
        return sorted(self.cache.glob(f"images/{model}/*/*/manifest.json"))

    def leader(self) -> str | None:
        lease = self.server.get("leases", NS, f"{FULLNAME}-leader") or {}
        return (lease.get("spec") or {}).get("holderIdentity") or None


def _build_images(repo: Path, store: str, env: dict[str, str]) -> None:
    import boto3

    bucket = store.removeprefix("s3://").split("/")[0]
    s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL_S3"], region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
    s3.create_bucket(Bucket=bucket)
    for model in MODELS:
        argv = [sys.executable, "-m", "thaw.cli", "snapshot", "build", str(repo / model)]
        done = subprocess.run(
            [*argv, "--store", store], capture_output=True, text=True, timeout=300,
            env={**os.environ, **env},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr


def _repository_configmap(repo: Path) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The model repository as a ConfigMap (one key per file) and the chart's items for it."""
    data, binary, items = {}, {}, []
    for path in sorted(p for p in repo.rglob("*") if p.is_file()):
        relative = path.relative_to(repo).as_posix()
        key = relative.replace("/", ".")
        if path.suffix == ".pbtxt":
            data[key] = path.read_text()
        else:
            binary[key] = base64.b64encode(path.read_bytes()).decode()
        items.append({"key": key, "path": relative})
    body = {"metadata": {"name": REPOSITORY}, "data": data, "binaryData": binary}
    return body, items


def _values(mode: KubeletMode, items: list[dict[str, str]], store: str) -> dict[str, Any]:
    repository, _, tag = (mode.image or "ghcr.io/thaw-serve/thaw:0.1.0").rpartition(":")
    image = {"repository": repository, "tag": tag, "pullPolicy": "Never"}
    return {
        "image": image,
        "imageGpu": {"repository": repository, "tag": tag},
        "activator": {
            "replicas": 2,
            "leaseDurationSeconds": 2,
            "terminationGracePeriodSeconds": 10,
            "extraArgs": ["--orphan-grace-s=5"],
        },
        "runtime": {
            "pools": {"default": {"replicas": 1, "gpu": 0}},
            "preloadFrameworks": ["onnxruntime"],
            "terminationGracePeriodSeconds": 5,
        },
        "modelRepository": {
            "source": "configMap",
            "configMapName": REPOSITORY,
            "configMapItems": items,
        },
        "images": {"storeUri": store, "region": "us-east-1"},
        "nodeCache": {"hostPath": CACHE_HOST_PATH, "prefetch": {"enabled": True}},
        # The fake API server serves no admissionregistration.k8s.io: the policies' CEL is
        # evaluated against these pods in tests/unit/deploy instead.
        "admissionPolicy": {"enabled": False},
        "models": [
            {"name": "onnx_add", "maxReplicas": 2, "targetConcurrency": 100,
             "scaleToZeroGraceSeconds": 3},
            {"name": "onnx_hot", "hot": True},
        ],
    }  # fmt: skip


async def _install(
    mode: KubeletMode,
    api: client.ApiClient,
    server: FakeKubeApiServer,
    kubelet_factory: Callable[..., LocalKubelet],
    helm: Path,
    s3_url: str,
    tmp_path: Path,
) -> Install:
    repo = tmp_path / "repo"
    for model in MODELS:
        make_onnx_add(repo, model)
    store = f"s3://e2e-{uuid.uuid4().hex[:8]}/images"
    env = moto_env(s3_url)
    await asyncio.to_thread(_build_images, repo, store, env)
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig", namespace=NS)
    kubeconfig.chmod(0o644)  # a projected service-account token is readable by the pod's user
    cache = tmp_path / "node-cache"  # absent: the kubelet makes it, as DirectoryOrCreate does
    kubelet = kubelet_factory(
        **mode.config(kubeconfig=kubeconfig, host_paths={CACHE_HOST_PATH: cache})
    )
    configmap, items = _repository_configmap(repo)
    await client.CoreV1Api(api).create_namespaced_config_map(NS, configmap)
    objects = await asyncio.to_thread(
        render, helm, _values(mode, items, store), home=tmp_path / "helm", release=RELEASE,
        namespace=NS,
    )  # fmt: skip
    inject_env(objects, env)
    started = time.monotonic()
    kinds = await apply(api, objects, namespace=NS, nodes=[kubelet.config.node_name])
    done = Install(objects, kinds, cache, kubelet, server, 0.0)

    def ready() -> bool:
        pool = [p for p in done.pods(**{"thaw.dev/pool": f"{FULLNAME}-pool"}) if is_ready(p)]
        return len(done.activators()) == 2 and len(pool) == 1

    try:
        await eventually(ready, timeout_s=120, interval_s=0.1)
    except AssertionError:
        raise AssertionError(_logs(done)) from None
    done.seconds_to_ready = time.monotonic() - started
    return done


def _logs(install: Install) -> str:
    out = []
    for pod in install.server.objects("pods", NS):
        name = pod["metadata"]["name"]
        status = pod.get("status") or {}
        out.append(f"--- {name} {status.get('phase')} {status.get('containerStatuses')}")
        out.append(install.kubelet.logs(NS, name)[-3000:])
    return "\n".join(out)


async def _infer(session: aiohttp.ClientSession, url: str, model: str = "onnx_add") -> int:
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
                        "data": [1, 2, 3, 4]}]}  # fmt: skip
    try:
        async with session.post(f"{url}/v2/models/{model}/infer", json=body) as resp:
            answer = await resp.json()
            if resp.status == 200:
                expected = np.array([1, 2, 3, 4], np.float32) + _W
                np.testing.assert_allclose(answer["outputs"][0]["data"], expected, rtol=1e-6)
            return resp.status
    except aiohttp.ClientError:
        return -1


def _claims(server: FakeKubeApiServer) -> Counter[str]:
    """Pod name -> claim patches (a model label with a resourceVersion) answered 200."""
    claims: Counter[str] = Counter()
    for r in server.requests:
        meta = (r.body or {}).get("metadata", {}) if isinstance(r.body, dict) else {}
        claim = r.verb == "patch" and r.resource == "pods" and "resourceVersion" in meta
        if claim and r.status == 200 and LABEL_MODEL in (meta.get("labels") or {}):
            claims[str(r.name)] += 1
    return claims


class Phases:
    """Seconds per named step of a story, printed at the end (`pytest -s` shows them)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.last = time.monotonic()
        self.steps: list[tuple[str, float]] = []

    def done(self, step: str) -> None:
        now = time.monotonic()
        self.steps.append((step, now - self.last))
        self.last = now

    def __str__(self) -> str:
        return f"[{self.mode}] " + ", ".join(f"{s} {t:.1f}s" for s, t in self.steps)


def _owners(paths: list[Path]) -> set[tuple[int, int]]:
    return {(p.stat().st_uid, p.stat().st_gid) for p in paths}


@pytest.mark.parametrize("kubelet_mode", KUBELET_MODES, indirect=True)
async def test_the_chart_prefetches_serves_a_cold_request_from_the_node_cache_and_bursts_from_zero(
    kubelet_mode: KubeletMode,
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubelet_factory: Callable[..., LocalKubelet],
    helm: Path,
    s3_url: str,
    tmp_path: Path,
) -> None:
    phases = Phases(kubelet_mode.name)
    chart = await _install(
        kubelet_mode, kube_api, kube_apiserver, kubelet_factory, helm, s3_url, tmp_path
    )
    phases.done(f"install (ready {chart.seconds_to_ready:.1f}s)")
    assert chart.kinds.count("Deployment") == 2 and "DaemonSet" in chart.kinds
    # The cache DaemonSet's first pass pulls the hot model's image, and only its.
    hot = await eventually(lambda: chart.images("onnx_hot"), timeout_s=60)
    assert not chart.images("onnx_add"), "only hot models are prefetched"
    phases.done("prefetch")

    urls = itertools.cycle(chart.activators())
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        # Cold: a pool pod is claimed and fills the node cache from the store as it restores.
        assert await _infer(session, next(urls)) == 200, _logs(chart)
        phases.done("cold request")
        filled = chart.images("onnx_add")
        assert filled, "the runtime pod filled the node cache from the store"
        (claimed,) = chart.pods(**{LABEL_MODEL: "onnx_add"})
        async with session.get(f"http://{claimed['status']['podIP']}:8000/metrics") as resp:
            metrics = await resp.text()
        assert 'thaw_model_restored_from_snapshot{model="onnx_add",version="1"} 1\n' in metrics
        if kubelet_mode.podman:  # written by the pods' user, 10001, into the hostPath
            assert _owners(filled + hot) == {(10001, 10001)}, _owners(filled + hot)

        # Idle past its grace: back to zero.
        await eventually(lambda: not chart.pods(**{LABEL_MODEL: "onnx_add"}), timeout_s=60)
        phases.done("scale to zero")

        # A burst from zero, split over both activators: none lost, no pod claimed twice.
        codes = await asyncio.gather(*(_infer(session, next(urls)) for _ in range(100)))
        phases.done("burst of 100 from zero")
    print(phases)
    assert Counter(codes) == {200: 100}, (Counter(codes), _logs(chart))
    claims = _claims(kube_apiserver)
    assert claims and all(n == 1 for n in claims.values()), claims


@pytest.mark.parametrize("kubelet_mode", KUBELET_MODES, indirect=True)
async def test_deleting_the_leaders_pod_hands_over_the_lease_and_loses_no_request(
    kubelet_mode: KubeletMode,
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubelet_factory: Callable[..., LocalKubelet],
    helm: Path,
    s3_url: str,
    tmp_path: Path,
) -> None:
    phases = Phases(kubelet_mode.name)
    chart = await _install(
        kubelet_mode, kube_api, kube_apiserver, kubelet_factory, helm, s3_url, tmp_path
    )
    phases.done(f"install (ready {chart.seconds_to_ready:.1f}s)")
    leader = await eventually(chart.leader, timeout_s=20)
    codes: list[int] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def traffic(seconds: float) -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                live = chart.activators()  # the Service's endpoints at this moment
                wave = [_infer(session, live[i % len(live)]) for i in range(10)]
                codes.extend(await asyncio.gather(*wave))
                await asyncio.sleep(0.05)

        running = asyncio.create_task(traffic(8.0))
        await asyncio.sleep(1.0)
        await client.CoreV1Api(kube_api).delete_namespaced_pod(leader, NS)
        deleted_at = time.monotonic()
        successor = await eventually(
            lambda: chart.leader() not in (None, leader) and chart.leader(), timeout_s=20
        )
        handover_s = time.monotonic() - deleted_at
        phases.done(f"leader deleted, handed over in {handover_s:.1f}s")
        await running
    assert successor != leader
    assert handover_s <= 2 + 3.0, handover_s
    assert codes and Counter(codes) == {200: len(codes)}, (Counter(codes), _logs(chart))
    # The Deployment replaced the deleted activator; both serve again.
    await eventually(lambda: len(chart.activators()) == 2, timeout_s=60)
    phases.done(f"{len(codes)} requests, replacement activator ready")
    print(phases)
