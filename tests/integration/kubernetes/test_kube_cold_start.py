"""`thaw up --scaler kubernetes` end to end on the fake API server and the test kubelet: a cold
request claims a warm-pool pod, the model is restored from its image in the node cache and
served; the pool refills; idle, the model goes back to zero; with no pool pod ready, a model
pod is made from the pool's template."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from kubernetes_asyncio import client

from activator.scaler.kubernetes.pod_state import LABEL_MODEL, PodState, is_ready, state_of
from tests.fakes.kube_apiserver import FakeKubeApiServer
from tests.fakes.kube_fixtures import eventually
from tests.fakes.kubelet import LocalKubelet
from tests.fixtures.kube_fleet import (
    NAMESPACE,
    POOL_SELECTOR,
    build_image,
    pool_deployment,
    up_args,
)
from tests.fixtures.onnx_models import make_onnx_add
from tests.fixtures.up_process import UpProcess, with_params

pytestmark = pytest.mark.integration

_W = np.random.default_rng(0).standard_normal(4).astype(np.float32)  # make_onnx_add's weight


def _pods(server: FakeKubeApiServer, **labels: str | None) -> list[dict[str, Any]]:
    """Pods of the namespace whose labels are `labels` (None: the label is absent)."""
    found = []
    for pod in server.objects("pods", NAMESPACE):
        have = pod["metadata"].get("labels") or {}
        if all(have.get(k) == v for k, v in labels.items()):
            found.append(pod)
    return found


def _ready_pool(server: FakeKubeApiServer) -> list[dict[str, Any]]:
    return [p for p in _pods(server, **POOL_SELECTOR) if is_ready(p)]


async def _infer(session: aiohttp.ClientSession, url: str, values: list[float]) -> Any:
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": values}]}
    async with session.post(f"{url}/v2/models/onnx_add/infer", json=body) as resp:
        return resp.status, await resp.json()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    with_params(make_onnx_add(repo), scale_to_zero_grace_s=5, activation_timeout_s=60)
    return repo


async def _start_pool(api: client.ApiClient, server: FakeKubeApiServer, replicas: int) -> None:
    await client.AppsV1Api(api).create_namespaced_deployment(NAMESPACE, pool_deployment(replicas))
    await eventually(lambda: len(_ready_pool(server)) == replicas, timeout_s=60, interval_s=0.1)


async def test_a_cold_request_claims_a_pool_pod_restores_its_image_and_scales_to_zero(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubeconfig_path: Path,
    kubelet_factory: Callable[..., LocalKubelet],
    repo: Path,
    tmp_path: Path,
) -> None:
    cache = tmp_path / "cache"
    build_image(repo / "onnx_add", cache)
    kubelet_factory(host_paths={"/models": repo, "/cache": cache})
    await _start_pool(kube_api, kube_apiserver, 2)
    up = await asyncio.to_thread(
        UpProcess, repo, *up_args(kubeconfig_path, activator_id="activator-0")
    )
    try:
        async with aiohttp.ClientSession() as session:
            status, answer = await _infer(session, up.url, [1, 2, 3, 4])
            assert status == 200, answer
            expected = np.array([1, 2, 3, 4], np.float32) + _W
            np.testing.assert_allclose(answer["outputs"][0]["data"], expected, rtol=1e-6)

            # The serving mark (out of the pool's selector, owned by the Deployment) is written
            # beside the first request, not before its answer: it lands shortly after.
            def marked_serving() -> dict[str, Any] | None:
                (pod,) = _pods(kube_apiserver, **{LABEL_MODEL: "onnx_add"})
                serving = state_of(pod) is PodState.SERVING
                return pod if serving and "thaw.dev/pool" not in pod["metadata"]["labels"] else None

            claimed = await eventually(marked_serving, timeout_s=30)
            assert claimed is not None, "relabelled out of the pool's selector, marked serving"
            # The pool's ReplicaSet let it go and made a replacement: two idle pods again.
            refs = claimed["metadata"].get("ownerReferences") or []
            assert [r["kind"] for r in refs] == ["Deployment"]
            # The pod's own account of the restore, read while it serves: a request first, so
            # the idle grace cannot run out under a slow machine before the read.
            status, answer = await _infer(session, up.url, [1, 2, 3, 4])
            assert status == 200, answer
            pod_url = f"http://{claimed['status']['podIP']}:8000"
            async with session.get(f"{pod_url}/metrics") as resp:
                metrics = await resp.text()
            assert 'thaw_model_restored_from_snapshot{model="onnx_add",version="1"} 1\n' in metrics
            await eventually(lambda: len(_ready_pool(kube_apiserver)) == 2, timeout_s=60)
            async with session.get(f"{up.url}/metrics") as resp:
                text = await resp.text()
            assert (
                'thaw_kube_pod_claims_total{model="onnx_add",placement_class="default",'
                'result="claimed"} 1\n' in text
            )
            assert "thaw_scaling_leader 1\n" in text

            # Idle past its grace: drained and deleted; the pool is untouched.
            await eventually(
                lambda: not _pods(kube_apiserver, **{LABEL_MODEL: "onnx_add"}), timeout_s=30
            )
            assert len(_ready_pool(kube_apiserver)) == 2
    finally:
        up.stop()
    assert "Traceback" not in up.log(), up.log()


async def test_no_ready_pool_pod_creates_a_model_pod_from_the_pools_template(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubeconfig_path: Path,
    kubelet_factory: Callable[..., LocalKubelet],
    repo: Path,
    tmp_path: Path,
) -> None:
    cache = tmp_path / "cache"
    kubelet_factory(host_paths={"/models": repo, "/cache": cache})
    await client.AppsV1Api(kube_api).create_namespaced_deployment(NAMESPACE, pool_deployment(0))
    up = await asyncio.to_thread(
        UpProcess, repo, *up_args(kubeconfig_path, activator_id="activator-0")
    )
    try:
        async with aiohttp.ClientSession() as session:
            status, answer = await _infer(session, up.url, [0, 0, 0, 0])
            assert status == 200, answer
            async with session.get(f"{up.url}/metrics") as resp:
                text = await resp.text()
        assert 'thaw_kube_pool_misses_total{model="onnx_add",placement_class="default"} 1\n' in text
        (pod,) = _pods(kube_apiserver, **{LABEL_MODEL: "onnx_add"})
        assert pod["metadata"]["name"].startswith("thaw-onnx-add-")
        assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "runtime"
        assert not _pods(kube_apiserver, **POOL_SELECTOR)
    finally:
        up.stop()
