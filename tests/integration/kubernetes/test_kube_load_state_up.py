"""Explicit mode's load state across two activators of one fleet on the fake Kubernetes
(decision 0024, "Kubernetes, later"): a model neither loaded is refused by both; a load on
activator A makes it servable on B; an unload on B makes A refuse it with Triton's 404 and
drains its pods, whichever activator leads; an activator started later takes the fleet's
state over its own `--load-model-at-zero`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import tritonclient.grpc as grpcclient
from kubernetes_asyncio import client

from activator.scaler.kubernetes.pod_state import LABEL_MODEL, is_ready
from tests.fakes.kube_apiserver import FakeKubeApiServer
from tests.fakes.kube_fixtures import eventually
from tests.fakes.kubelet import LocalKubelet
from tests.fakes.loop import HUNG_AFTER_S
from tests.fixtures.kube_fleet import NAMESPACE, pool_deployment, up_args
from tests.fixtures.models import make_add_sub
from tests.fixtures.up_process import UpProcess, with_params

pytestmark = pytest.mark.integration

LOAD_STATE_LEASE = "thaw-activator-leader-load-state"
BODY = {
    "inputs": [
        {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": [1, 1, 1, 1]},
    ]
}
NOT_READY = "model 'add_sub' is not ready"
UNLOADED = "Request for unknown model: 'add_sub' has no available versions"


async def _infer(session: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with session.post(f"{url}/v2/models/add_sub/infer", json=BODY) as resp:
        return resp.status, await resp.json()


def _model_pods(server: FakeKubeApiServer) -> list[dict[str, Any]]:
    return [
        p
        for p in server.objects("pods", NAMESPACE)
        if (p["metadata"].get("labels") or {}).get(LABEL_MODEL) == "add_sub"
    ]


async def test_a_load_on_one_activator_serves_on_the_other_and_an_unload_refuses_on_both(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubeconfig_path: Path,
    kubelet_factory: Callable[..., LocalKubelet],
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    with_params(make_add_sub(repo), scale_to_zero_grace_s=30)
    kubelet_factory(host_paths={"/models": repo, "/cache": tmp_path / "cache"})
    await client.AppsV1Api(kube_api).create_namespaced_deployment(NAMESPACE, pool_deployment(1))

    def ready_pool() -> bool:
        return any(is_ready(p) for p in kube_apiserver.objects("pods", NAMESPACE))

    await eventually(ready_pool, timeout_s=60, interval_s=0.1)
    args = [up_args(kubeconfig_path, activator_id=f"act-{i}", loaded_at_start=False) for i in "01"]
    starts = (asyncio.to_thread(UpProcess, repo, *arg) for arg in args)
    ups = list(await asyncio.gather(*starts))
    a, b = ups
    try:
        async with aiohttp.ClientSession() as session:
            # Loaded by neither: both refuse it, nothing wakes.
            for up in ups:
                status, body = await _infer(session, up.url)
                assert (status, body["error"]) == (503, NOT_READY)
            assert not _model_pods(kube_apiserver)

            async with session.post(f"{a.url}/v2/repository/models/add_sub/load") as resp:
                assert resp.status == 200, await resp.text()

            # B learns it within a retry period of the Lease (0.25 s here): served there.
            async def served_on_b() -> bool:
                status, body = await _infer(session, b.url)
                assert status in (200, 503), body
                return status == 200

            await eventually(served_on_b, timeout_s=HUNG_AFTER_S, interval_s=0.1)
            async with session.get(f"{b.url}/v2/models/add_sub/ready") as resp:
                assert resp.status == 200

            async with session.post(f"{b.url}/v2/repository/models/add_sub/unload") as resp:
                assert resp.status == 200, await resp.text()
            status, body = await _infer(session, b.url)  # at once on the one that unloaded
            assert (status, body["error"]) == (404, UNLOADED)

            async def refused_on_a() -> bool:
                status, body = await _infer(session, a.url)
                assert status in (200, 404), body
                return status == 404 and body["error"] == UNLOADED

            await eventually(refused_on_a, timeout_s=HUNG_AFTER_S, interval_s=0.1)
            async with session.get(f"{a.url}/v2/models/add_sub/ready") as resp:
                assert resp.status != 200
            # Drained to zero, whichever activator leads (not left for the idle grace, 30 s).
            await eventually(lambda: not _model_pods(kube_apiserver), timeout_s=HUNG_AFTER_S)

            # Loaded again on B: A serves it again.
            async with session.post(f"{b.url}/v2/repository/models/add_sub/load") as resp:
                assert resp.status == 200, await resp.text()

            async def served_on_a() -> bool:
                status, _ = await _infer(session, a.url)
                return status == 200

            await eventually(served_on_a, timeout_s=HUNG_AFTER_S, interval_s=0.1)

            # Unloaded again; an activator started after, whose flags load every model, takes
            # the fleet's word: refused from its start.
            async with session.post(f"{b.url}/v2/repository/models/add_sub/unload") as resp:
                assert resp.status == 200, await resp.text()
            await asyncio.to_thread(a.stop)
            ups[0] = a = await asyncio.to_thread(
                UpProcess, repo, *up_args(kubeconfig_path, activator_id="act-2")
            )
            status, body = await _infer(session, a.url)
            assert (status, body["error"]) == (404, UNLOADED)
        lease = kube_apiserver.get("leases", NAMESPACE, LOAD_STATE_LEASE)
        assert lease is not None
        assert '"add_sub": "unloaded"' in lease["metadata"]["annotations"]["thaw.dev/load-state"]
    finally:
        for up in ups:
            up.stop()


async def test_a_request_right_after_a_load_on_another_activator_is_served(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubeconfig_path: Path,
    kubelet_factory: Callable[..., LocalKubelet],
    tmp_path: Path,
) -> None:
    """A client loads a model through activator A and sends its next requests through B (the
    Service balances connections): B reads the fleet's load state for them at once, where it
    would refuse them until its next periodic read (here 5 s away: `--lease-duration-s 40`):
    an inference over REST, a readiness check over gRPC, the repository index, statistics,
    OpenAI's model list."""
    repo = tmp_path / "repo"
    with_params(make_add_sub(repo), scale_to_zero_grace_s=30)
    with_params(make_add_sub(repo, "add_sub_2"), scale_to_zero_grace_s=30)
    with_params(make_add_sub(repo, "add_sub_3"), scale_to_zero_grace_s=30)
    with_params(make_add_sub(repo, "add_sub_4"), scale_to_zero_grace_s=30)
    with_params(make_add_sub(repo, "add_sub_5"), scale_to_zero_grace_s=30)
    kubelet_factory(host_paths={"/models": repo, "/cache": tmp_path / "cache"})
    await client.AppsV1Api(kube_api).create_namespaced_deployment(NAMESPACE, pool_deployment(1))
    await eventually(
        lambda: any(is_ready(p) for p in kube_apiserver.objects("pods", NAMESPACE)),
        timeout_s=60,
        interval_s=0.1,
    )
    slow_reads = ["--lease-duration-s", "40"]
    args = [
        up_args(kubeconfig_path, activator_id=f"act-{i}", loaded_at_start=False, extra=slow_reads)
        for i in "01"
    ]
    ups = list(await asyncio.gather(*(asyncio.to_thread(UpProcess, repo, *arg) for arg in args)))
    a, b = ups
    try:
        async with aiohttp.ClientSession() as session:
            for up in ups:  # loaded by neither: both refuse it (and read the Lease to say so)
                status, body = await _infer(session, up.url)
                assert (status, body["error"]) == (503, NOT_READY)
            async with session.post(f"{a.url}/v2/repository/models/add_sub/load") as resp:
                assert resp.status == 200, await resp.text()
            status, body = await _infer(session, b.url)
            assert status == 200, body

            async with session.post(f"{a.url}/v2/repository/models/add_sub_2/load") as resp:
                assert resp.status == 200, await resp.text()
            grpc = grpcclient.InferenceServerClient(b.grpc_address)
            try:
                assert await asyncio.to_thread(grpc.is_model_ready, "add_sub_2")
            finally:
                grpc.close()

            async with session.post(f"{a.url}/v2/repository/models/add_sub_3/load") as resp:
                assert resp.status == 200, await resp.text()
            async with session.post(f"{b.url}/v2/repository/index", json={}) as resp:
                rows = {row["name"]: row.get("state") for row in await resp.json()}
            assert rows["add_sub_3"] == "READY", rows

            async with session.post(f"{a.url}/v2/repository/models/add_sub_4/load") as resp:
                assert resp.status == 200, await resp.text()
            async with session.get(f"{b.url}/v2/models/add_sub_4/stats") as resp:
                assert resp.status == 200, await resp.text()

            async with session.post(f"{a.url}/v2/repository/models/add_sub_5/load") as resp:
                assert resp.status == 200, await resp.text()
            async with session.get(f"{b.url}/v1/models") as resp:
                listed = [model["id"] for model in (await resp.json())["data"]]
            assert "add_sub_5" in listed, listed
    finally:
        for up in ups:
            up.stop()
