"""Active-active activators on the fake Kubernetes: a burst of 200 requests from zero split over
two activators (none lost, one leader scaling on the total); the leader killed mid-burst (the
other leads within the lease duration, serves everything it held, no pod claimed twice); an
activator restarted finds its model's pods again by label instead of claiming new ones."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from activator.scaler.kubernetes.pod_state import LABEL_MODEL, is_ready
from tests.fakes.kube_apiserver import FakeKubeApiServer
from tests.fakes.kube_fixtures import eventually
from tests.fakes.kubelet import LocalKubelet
from tests.fixtures.kube_fleet import NAMESPACE, pool_deployment, up_args
from tests.fixtures.models import make_add_sub
from tests.fixtures.up_process import UpProcess, with_params

pytestmark = pytest.mark.integration

LEASE = "thaw-activator-leader"
LEASE_S = 2


def _holder(server: FakeKubeApiServer) -> str | None:
    lease = server.get("leases", NAMESPACE, LEASE)
    return (lease or {}).get("spec", {}).get("holderIdentity") or None


def _model_pods(server: FakeKubeApiServer) -> list[dict[str, Any]]:
    return [
        p
        for p in server.objects("pods", NAMESPACE)
        if (p["metadata"].get("labels") or {}).get(LABEL_MODEL) == "add_sub"
    ]


def _successful_claims(server: FakeKubeApiServer) -> Counter[str]:
    """Pod name -> claim patches (merge patches carrying a resourceVersion) answered 200."""
    claims: Counter[str] = Counter()
    for r in server.requests:
        meta = (r.body or {}).get("metadata", {}) if isinstance(r.body, dict) else {}
        claim = r.verb == "patch" and r.resource == "pods" and "resourceVersion" in meta
        if claim and r.status == 200 and LABEL_MODEL in (meta.get("labels") or {}):
            claims[str(r.name)] += 1
    return claims


async def _infer(session: aiohttp.ClientSession, url: str) -> int:
    body = {
        "inputs": [
            {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]},
            {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": [1, 1, 1, 1]},
        ]
    }
    try:
        async with session.post(f"{url}/v2/models/add_sub/infer", json=body) as resp:
            data = await resp.json()
            if resp.status == 200:
                assert data["outputs"][0]["data"] == [2, 3, 4, 5]
            return resp.status
    except aiohttp.ClientError:
        return -1  # the activator died with the request


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    with_params(make_add_sub(repo), scale_to_zero_grace_s=30, target_concurrency=50)
    return repo


async def _fleet(
    api: client.ApiClient,
    server: FakeKubeApiServer,
    kubelet_factory: Callable[..., LocalKubelet],
    repo: Path,
    tmp_path: Path,
    pool: int,
) -> None:
    kubelet_factory(host_paths={"/models": repo, "/cache": tmp_path / "cache"})
    await client.AppsV1Api(api).create_namespaced_deployment(NAMESPACE, pool_deployment(pool))

    def ready_pool() -> bool:
        pods = [p for p in server.objects("pods", NAMESPACE) if is_ready(p)]
        return len([p for p in pods if p["metadata"]["labels"].get("thaw.dev/pool")]) == pool

    await eventually(ready_pool, timeout_s=60, interval_s=0.1)


async def _activators(repo: Path, kubeconfig: Path, count: int) -> list[UpProcess]:
    return list(
        await asyncio.gather(
            *(
                asyncio.to_thread(UpProcess, repo, *up_args(kubeconfig, activator_id=f"act-{i}"))
                for i in range(count)
            )
        )
    )


async def test_a_burst_of_200_from_zero_over_two_activators_loses_none(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubeconfig_path: Path,
    kubelet_factory: Callable[..., LocalKubelet],
    repo: Path,
    tmp_path: Path,
) -> None:
    await _fleet(kube_api, kube_apiserver, kubelet_factory, repo, tmp_path, pool=2)
    ups = await _activators(repo, kubeconfig_path, 2)
    try:
        await eventually(lambda: _holder(kube_apiserver), timeout_s=10)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            codes = await asyncio.gather(*(_infer(session, ups[i % 2].url) for i in range(200)))
        assert Counter(codes) == {200: 200}
        assert all(n == 1 for n in _successful_claims(kube_apiserver).values())
        # One leader scaled on the total: only it claimed; the follower attached.
        leader = _holder(kube_apiserver)
        claimers = {
            p["metadata"]["annotations"]["thaw.dev/claimed-by"] for p in _model_pods(kube_apiserver)
        }
        assert claimers == {leader}
    finally:
        for up in ups:
            up.stop()


async def test_the_leader_killed_mid_burst_hands_over_and_the_survivor_serves_all_it_held(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubeconfig_path: Path,
    kubelet_factory: Callable[..., LocalKubelet],
    repo: Path,
    tmp_path: Path,
) -> None:
    await _fleet(kube_api, kube_apiserver, kubelet_factory, repo, tmp_path, pool=2)
    ups = await _activators(repo, kubeconfig_path, 2)
    try:
        leader_id = await eventually(lambda: _holder(kube_apiserver), timeout_s=10)
        leader = ups[int(leader_id.removeprefix("act-"))]
        survivor = ups[1 - ups.index(leader)]
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            to_survivor = [asyncio.ensure_future(_infer(session, survivor.url)) for _ in range(100)]
            to_leader = [asyncio.ensure_future(_infer(session, leader.url)) for _ in range(100)]
            for up in (survivor, leader):  # requests held on both; the leader claims a pod
                await asyncio.to_thread(
                    up.wait_for,
                    lambda up=up: up.model("add_sub")["held_requests"] > 0,
                    30,
                    "requests held",
                )
            leader.proc.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            new_leader = await eventually(
                lambda: _holder(kube_apiserver) not in (None, leader_id), timeout_s=10
            )
            handover_s = time.monotonic() - killed_at
            survived = await asyncio.gather(*to_survivor)
            await asyncio.gather(*to_leader)
        assert new_leader
        assert _holder(kube_apiserver) == f"act-{ups.index(survivor)}"
        assert handover_s <= LEASE_S + 1.0, handover_s
        assert Counter(survived) == {200: 100}, survivor.log()
        claims = _successful_claims(kube_apiserver)
        assert claims and all(n == 1 for n in claims.values()), claims
        # A pod the dead leader had claimed: adopted if it came to serve, else (still
        # loading, nobody's) collected after the orphan grace. None stays stuck.
        await eventually(
            lambda: all(
                p["metadata"]["annotations"]["thaw.dev/state"] == "serving"
                for p in _model_pods(kube_apiserver)
                if not p["metadata"].get("deletionTimestamp")
            ),
            # A dead leader's pod nobody attached: unowned at the new leader's first
            # collection pass (every 10 s), collected one orphan grace (5 s) after that one.
            timeout_s=45,
        )
    finally:
        leader.stop(signal.SIGKILL)
        survivor.stop()


async def test_a_restarted_activator_finds_its_models_pods_again_by_label(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubeconfig_path: Path,
    kubelet_factory: Callable[..., LocalKubelet],
    repo: Path,
    tmp_path: Path,
) -> None:
    await _fleet(kube_api, kube_apiserver, kubelet_factory, repo, tmp_path, pool=1)
    (first,) = await _activators(repo, kubeconfig_path, 1)
    async with aiohttp.ClientSession() as session:
        assert await _infer(session, first.url) == 200
        (pod,) = _model_pods(kube_apiserver)
        assert first.stop() == 0  # SIGTERM: hands the Lease over, leaves the pods running
        assert [p["metadata"]["name"] for p in _model_pods(kube_apiserver)] == [
            pod["metadata"]["name"]
        ]
        (second,) = await _activators(repo, kubeconfig_path, 1)
        try:
            assert await _infer(session, second.url) == 200
            async with session.get(f"{second.url}/metrics") as resp:
                metrics = await resp.text()
            assert "thaw_kube_pod_claims_total{" not in metrics  # adopted, not claimed
            assert [p["metadata"]["name"] for p in _model_pods(kube_apiserver)] == [
                pod["metadata"]["name"]
            ]
        finally:
            second.stop()
