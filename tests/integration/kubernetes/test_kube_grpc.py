"""gRPC and Triton's metrics through `thaw up --scaler kubernetes`, on the fake API server and the
test kubelet: a `tritonclient.grpc` inference for a model at zero is held, a warm-pool pod is
claimed, and the call is forwarded to that pod's gRPC port (the container port named `grpc`, or
8001 when the pod names none), by a restarted activator too; the activator's /metrics (and its
metrics port) show the pod's `nv_*` series, which stay after the pod is gone."""

from __future__ import annotations

import asyncio
import json
import queue
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from kubernetes_asyncio import client

from activator.scaler.kubernetes.pod_state import LABEL_MODEL, PodState, state_of
from tests.fakes.kube_apiserver import FakeKubeApiServer
from tests.fakes.kube_fixtures import eventually
from tests.fakes.kubelet import LocalKubelet
from tests.fixtures.kube_fleet import (
    NAMESPACE,
    pool_deployment,
    ready_pool_pods,
    up_args,
)
from tests.fixtures.onnx_models import make_onnx_add
from tests.fixtures.up_process import UpProcess, with_params

pytestmark = pytest.mark.integration

_W = np.random.default_rng(0).standard_normal(4).astype(np.float32)  # make_onnx_add's weight


@pytest.fixture
def repo(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """`onnx_add`, idle to zero after 2 s (or the grace an indirect parameter gives)."""
    repo = tmp_path / "repo"
    grace_s = getattr(request, "param", 2)
    with_params(make_onnx_add(repo), scale_to_zero_grace_s=grace_s, activation_timeout_s=60)
    return repo


@pytest.fixture
def fleet(kubelet_factory: Callable[..., LocalKubelet], repo: Path, tmp_path: Path) -> LocalKubelet:
    return kubelet_factory(host_paths={"/models": repo, "/cache": tmp_path / "cache"})


@pytest.fixture
def client_of() -> Iterator[Callable[[str], grpcclient.InferenceServerClient]]:
    made: list[grpcclient.InferenceServerClient] = []

    def make(address: str) -> grpcclient.InferenceServerClient:
        made.append(grpcclient.InferenceServerClient(address))
        return made[-1]

    yield make
    for c in made:
        c.close()


def _model_pods(server: FakeKubeApiServer) -> list[dict[str, Any]]:
    return [
        p
        for p in server.objects("pods", NAMESPACE)
        if (p["metadata"].get("labels") or {}).get(LABEL_MODEL) == "onnx_add"
    ]


async def _start_pool(
    api: client.ApiClient, server: FakeKubeApiServer, manifest: dict[str, Any]
) -> None:
    await client.AppsV1Api(api).create_namespaced_deployment(NAMESPACE, manifest)
    replicas = manifest["spec"]["replicas"]
    await eventually(lambda: len(ready_pool_pods(server)) == replicas, timeout_s=60, interval_s=0.1)


def _inputs(values: list[float]) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.array([values], dtype=np.float32))
    return [tensor]


def _series(text: str, name: str) -> float | None:
    found = re.search(rf'^{name}{{model="onnx_add",version="1"}} (\S+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else None


async def _text(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url) as resp:
        assert resp.status == 200, url
        return await resp.text()


@pytest.mark.parametrize("repo", [30], indirect=True)  # stays up across the restart below
async def test_a_grpc_inference_at_zero_is_held_and_served_by_a_claimed_pool_pod(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubeconfig_path: Path,
    fleet: LocalKubelet,
    repo: Path,
    client_of: Callable[[str], grpcclient.InferenceServerClient],
) -> None:
    # The pool's runtimes serve gRPC on 9001, named `grpc`: not the default 8001, so the
    # call reaches the pod only if the activator reads the pod's named port.
    manifest = pool_deployment(1, extra_args=["--grpc-port", "9001", "--metrics-port", "9002"])
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    container["ports"] += [
        {"name": "grpc", "containerPort": 9001},
        {"name": "metrics", "containerPort": 9002},
    ]
    await _start_pool(kube_api, kube_apiserver, manifest)
    up = await asyncio.to_thread(
        UpProcess, repo, *up_args(kubeconfig_path, activator_id="activator-0")
    )
    try:
        assert up.grpc_address, up.log()
        grpc = client_of(up.grpc_address)
        assert up.model("onnx_add")["replicas_ready"] == 0 and not _model_pods(kube_apiserver)
        result = await asyncio.to_thread(
            grpc.infer, "onnx_add", _inputs([1, 2, 3, 4]), request_id="cold"
        )
        expected = np.array([[1, 2, 3, 4]], np.float32) + _W
        np.testing.assert_allclose(result.as_numpy("OUTPUT0"), expected, rtol=1e-6)
        assert result.get_response().id == "cold"
        assert up.model("onnx_add")["last_cold_start_s"] > 0

        # It was held while a pool pod was claimed, and that pod answered it. The serving mark
        # (out of the pool's selector) is written beside the first request, not before its
        # answer: it lands shortly after (seen late beside a second make test).
        def marked_serving() -> dict[str, Any] | None:
            (pod,) = _model_pods(kube_apiserver)
            serving = state_of(pod) is PodState.SERVING
            return pod if serving and "thaw.dev/pool" not in pod["metadata"]["labels"] else None

        claimed = await eventually(marked_serving, timeout_s=30)
        assert claimed is not None, "relabelled out of the pool's selector, marked serving"
        ip = claimed["status"]["podIP"]
        assert f"(gRPC {ip}:9001)" in up.log()

        # A stream through the activator reaches the same pod.
        answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
        grpc.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            grpc.async_stream_infer("onnx_add", _inputs([0, 0, 0, 0]), request_id="s0")
            streamed, error = await asyncio.to_thread(answers.get, timeout=30)
        finally:
            grpc.stop_stream()
        assert error is None, error
        np.testing.assert_allclose(streamed.as_numpy("OUTPUT0"), _W[None, :], rtol=1e-6)

    finally:
        up.stop()  # SIGTERM: lets go of the pod, which keeps serving
    assert "Traceback" not in up.log(), up.log()

    # A restarted activator attaches the serving pod by label, its gRPC address with it.
    again = await asyncio.to_thread(
        UpProcess, repo, *up_args(kubeconfig_path, activator_id="activator-1")
    )
    try:
        result = await asyncio.to_thread(
            client_of(again.grpc_address).infer, "onnx_add", _inputs([1, 1, 1, 1])
        )
        np.testing.assert_allclose(result.as_numpy("OUTPUT0"), 1 + _W[None, :], rtol=1e-6)
        assert "thaw_kube_pod_claims_total{" not in again.metrics()  # adopted, not claimed
        assert [p["metadata"]["name"] for p in _model_pods(kube_apiserver)] == [
            claimed["metadata"]["name"]
        ]
        async with aiohttp.ClientSession() as session:
            stats = await _text(session, f"http://{ip}:8000/v2/models/onnx_add/stats")
        (row,) = json.loads(stats)["model_stats"]
        assert row["inference_count"] == 3  # every call ran on the claimed pod
    finally:
        again.stop()
    assert "Traceback" not in again.log(), again.log()


async def test_the_activators_metrics_show_the_pods_nv_series_and_keep_them_past_zero(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubeconfig_path: Path,
    fleet: LocalKubelet,
    repo: Path,
    client_of: Callable[[str], grpcclient.InferenceServerClient],
) -> None:
    # The pool's pods name only their `http` port (`thaw serve --port 8000`): gRPC is on
    # 8001 and metrics on 8002, the runtime's defaults.
    await _start_pool(kube_api, kube_apiserver, pool_deployment(1))
    up = await asyncio.to_thread(
        UpProcess, repo, *up_args(kubeconfig_path, activator_id="activator-0")
    )
    try:
        grpc = client_of(up.grpc_address)
        for i in range(3):
            await asyncio.to_thread(grpc.infer, "onnx_add", _inputs([float(i)] * 4))
        (pod,) = _model_pods(kube_apiserver)
        ip = pod["status"]["podIP"]
        async with aiohttp.ClientSession() as session:
            on_pod = await _text(session, f"http://{ip}:8002/metrics")  # Triton's port
            assert _series(on_pod, "nv_inference_count") == 3
            for url in (f"{up.url}/metrics", f"{up.metrics_url}/metrics"):
                text = await _text(session, url)
                assert _series(text, "nv_inference_count") == 3, text
                assert _series(text, "nv_inference_request_success") == 3
                assert _series(text, "nv_inference_exec_count") == 3
                assert "thaw_kube_pod_claims_total" in text  # beside the activator's own

            # Idle past its grace the pod is deleted; its counts stay on the activator.
            await eventually(lambda: not _model_pods(kube_apiserver), timeout_s=30)
            await eventually(lambda: not up.model("onnx_add")["replicas"], timeout_s=10)
            text = await _text(session, f"{up.url}/metrics")
            assert _series(text, "nv_inference_count") == 3
            assert _series(text, "nv_inference_pending_request_count") == 0  # none live
    finally:
        up.stop()
    assert "Traceback" not in up.log(), up.log()
