"""Shared placement under a real `thaw up --scaler kubernetes` (one activator: leader election
off) on the fake API server with `thaw serve` pool pods under the test kubelet: two shared
models share one claimed pod within its budget, booked in its `thaw.dev/shared-load`
annotation; the least recently used idle one is evicted (unloaded from the pod) when a third
needs room, and re-woken in the same pod later; a restarted activator adopts the rooms booked
before it started (and frees a booking whose pod no longer has its model)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from activator.scaler.kubernetes.pod_budget import booking_patch, load_of
from activator.scaler.kubernetes.pod_state import is_ready
from tests.fakes.kube_apiserver import FakeKubeApiServer
from tests.fakes.kube_fixtures import eventually
from tests.fakes.kubelet import LocalKubelet
from tests.fixtures.kube_fleet import NAMESPACE, POOL_SELECTOR, pool_deployment, up_args
from tests.fixtures.onnx_models import make_onnx_add
from tests.fixtures.up_process import UpProcess, with_params

pytestmark = pytest.mark.integration

MiB = 1 << 20
SIZE = MiB  # floats per ONNX model: 4 MiB of weights each
EVICT_GRACE_S = 0.5
MODELS = ("onnx_a", "onnx_b", "onnx_c")
LEASE = "thaw-activator-leader"


async def _infer(session: aiohttp.ClientSession, up: UpProcess, model: str) -> int:
    body: dict[str, Any] = {
        "inputs": [{"name": "INPUT0", "shape": [1, SIZE], "datatype": "FP32",
                    "data": [1.0] * SIZE}]
    }  # fmt: skip
    async with session.post(f"{up.url}/v2/models/{model}/infer", json=body) as resp:
        await resp.read()
        return resp.status


def _hosts(up: UpProcess) -> dict[str, list[str]]:
    return {r["id"]: r["models"] for r in up.get("/thaw/status")["shared"]["replicas"]}


def _booked(server: FakeKubeApiServer, pod: str) -> dict[str, int]:
    load = load_of(server.get("pods", NAMESPACE, pod) or {})
    assert load is not None
    return dict(load.models)


def _lease_holder(server: FakeKubeApiServer) -> str | None:
    """The activator holding the scaling leader's Lease, if any."""
    lease = server.get("leases", NAMESPACE, LEASE) or {}
    return lease.get("spec", {}).get("holderIdentity") or None


@contextlib.asynccontextmanager
async def _two_activators(repo: Path, kubeconfig: Path) -> AsyncIterator[dict[str, UpProcess]]:
    """`act-0` and `act-1` with shared placement, electing a leader; each is stopped after
    (a test may stop one sooner), and neither may have logged a traceback."""

    def start(name: str) -> UpProcess:
        return UpProcess(repo, *up_args(kubeconfig, activator_id=name, extra=SHARED_FLAGS))

    ups = {name: await asyncio.to_thread(start, name) for name in ("act-0", "act-1")}
    everyone = list(ups.values())
    try:
        yield ups
    finally:
        for up in everyone:
            up.stop()
    for up in everyone:
        assert "Traceback" not in up.log(), up.log()


async def _book_unloaded(
    server: FakeKubeApiServer, api: client.ApiClient, pod: str, model: str
) -> None:
    """Book `model` on `pod` without loading it there, as a leader that died in between
    (or a pod whose runtime restarted) leaves it."""
    current = server.get("pods", NAMESPACE, pod) or {}
    load = load_of(current)
    assert load is not None
    patch = booking_patch(current, load.booked(model, 1024))
    await client.CoreV1Api(api).patch_namespaced_pod(pod, NAMESPACE, patch)


def _idle_past_grace() -> None:
    """Let the eviction grace pass (a setting of this test's `thaw up`, not a measurement)."""
    time.sleep(EVICT_GRACE_S + 0.3)


async def _fleet(
    server: FakeKubeApiServer,
    api: client.ApiClient,
    kubelet_factory: Callable[..., LocalKubelet],
    tmp_path: Path,
    *,
    memory_limit: str | None = None,
) -> tuple[Path, Callable[[], int]]:
    """Three shared 4 MiB models and a pool of two ready `thaw serve` pods (their runtime
    container limited to `memory_limit` if given)."""
    repo = tmp_path / "repo"
    for name in MODELS:
        # A long scale-to-zero grace: the only way off the shared pod is eviction.
        with_params(make_onnx_add(repo, name, size=SIZE), placement="shared",
                    scale_to_zero_grace_s=600, activation_timeout_s=60)  # fmt: skip
    kubelet_factory(host_paths={"/models": repo, "/cache": tmp_path / "cache"})
    pool = pool_deployment(2)
    if memory_limit is not None:
        (container,) = pool["spec"]["template"]["spec"]["containers"]
        container["resources"] = {"limits": {"memory": memory_limit}}
    await client.AppsV1Api(api).create_namespaced_deployment(NAMESPACE, pool)

    def ready_pool() -> int:
        pods = server.objects("pods", NAMESPACE)
        selected = [p for p in pods if POOL_SELECTOR.items() <= p["metadata"]["labels"].items()]
        return sum(is_ready(p) for p in selected)

    await eventually(lambda: ready_pool() == 2, timeout_s=90)
    return repo, ready_pool


# Room for two of the three 4 MiB models (plus their graphs' few bytes).
SHARED_FLAGS = [
    "--shared-replica-bytes", str(9 * MiB), "--shared-model-overhead-bytes", "0",
    "--evict-grace-s", str(EVICT_GRACE_S),
]  # fmt: skip


async def test_shared_models_share_a_pod_and_the_idle_one_is_evicted_and_rewoken(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubeconfig_path: Path,
    kubelet_factory: Callable[..., LocalKubelet],
    tmp_path: Path,
) -> None:
    repo, ready_pool = await _fleet(kube_apiserver, kube_api, kubelet_factory, tmp_path)
    extra = ["--leader-election", "off", *SHARED_FLAGS]
    up = await asyncio.to_thread(
        UpProcess, repo, *up_args(kubeconfig_path, activator_id="activator-0", extra=extra)
    )
    try:
        async with aiohttp.ClientSession() as session:
            assert await _infer(session, up, "onnx_a") == 200
            assert await _infer(session, up, "onnx_b") == 200
            hosts = _hosts(up)
            assert list(hosts.values()) == [["onnx_a", "onnx_b"]], hosts
            (pod,) = hosts
            assert set(_booked(kube_apiserver, pod)) == {"onnx_a", "onnx_b"}
            replicas = {m: up.model(m)["replicas"] for m in ("onnx_a", "onnx_b")}
            assert len({r[0]["url"] for r in replicas.values()}) == 1  # one pod serves both

            await asyncio.to_thread(_idle_past_grace)
            assert await _infer(session, up, "onnx_c") == 200
            # onnx_a, the least recently used idle one, made room in the same pod.
            assert _hosts(up) == {pod: ["onnx_b", "onnx_c"]}
            assert set(_booked(kube_apiserver, pod)) == {"onnx_b", "onnx_c"}
            assert up.model("onnx_a")["replicas_ready"] == 0
            assert up.get("/thaw/status")["shared"]["models"]["onnx_a"]["evictions"] == 1

            await asyncio.to_thread(_idle_past_grace)
            assert await _infer(session, up, "onnx_a") == 200  # re-woken: onnx_b goes
            assert _hosts(up) == {pod: ["onnx_a", "onnx_c"]}
            # Only the one pod was claimed: the other pool pod is still idle in the pool.
            assert ready_pool() >= 1
            counts = up.get("/thaw/status")["shared"]["models"]
            # Each load counted by where its weights came from (no image built here: the
            # model's files), read off the pod's own load counters.
            assert counts["onnx_a"] == {"evictions": 1, "loads": {"files": 2}}, counts
            assert counts["onnx_b"]["evictions"] == 1 and counts["onnx_c"]["evictions"] == 0
            metrics = up.metrics()
            assert 'thaw_shared_evictions_total{model="onnx_a"} 1\n' in metrics
            assert 'thaw_shared_loads_total{model="onnx_a",source="files"} 2\n' in metrics
    finally:
        up.stop()
    assert "Traceback" not in up.log(), up.log()


async def test_a_follower_routes_to_the_leaders_shared_pod_and_sees_its_evictions(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubeconfig_path: Path,
    kubelet_factory: Callable[..., LocalKubelet],
    tmp_path: Path,
) -> None:
    repo, _ready_pool = await _fleet(kube_apiserver, kube_api, kubelet_factory, tmp_path)
    async with _two_activators(repo, kubeconfig_path) as ups:
        leader_id = await eventually(lambda: _lease_holder(kube_apiserver), timeout_s=30)
        follower = next(up for name, up in ups.items() if name != leader_id)
        leader = ups[str(leader_id)]
        async with aiohttp.ClientSession() as session:
            # Every request through the follower: the leader places, the follower attaches.
            assert await _infer(session, follower, "onnx_a") == 200
            assert await _infer(session, follower, "onnx_b") == 200
            hosts = _hosts(follower)
            assert list(hosts.values()) == [["onnx_a", "onnx_b"]], hosts
            (pod,) = hosts
            assert _hosts(leader) == hosts
            urls = {follower.model(m)["replicas"][0]["url"] for m in ("onnx_a", "onnx_b")}
            assert len(urls) == 1  # the follower routes both models to the one shared pod

            # Idle past the grace and past the follower's last report of them.
            await asyncio.sleep(EVICT_GRACE_S + 1.5)
            assert await _infer(session, follower, "onnx_c") == 200
            assert _hosts(leader) == {pod: ["onnx_b", "onnx_c"]}
            # The follower stops routing onnx_a to the pod it was unloaded from.
            await eventually(lambda: follower.model("onnx_a")["replicas_ready"] == 0, timeout_s=10)
            await asyncio.sleep(EVICT_GRACE_S + 1.5)
            assert await _infer(session, follower, "onnx_a") == 200  # woken again, onnx_b goes
            assert _hosts(leader) == {pod: ["onnx_a", "onnx_c"]}
            counts = leader.get("/thaw/status")["shared"]["models"]
            assert counts["onnx_a"]["evictions"] == 1 and counts["onnx_b"]["evictions"] == 1


async def test_a_restarted_activator_adopts_the_booked_rooms_and_frees_a_stale_one(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubeconfig_path: Path,
    kubelet_factory: Callable[..., LocalKubelet],
    tmp_path: Path,
) -> None:
    """A stopped activator leaves its shared pods booked and loaded (they serve the other
    activators and the next one): the next one routes to them at start, without a request
    and without booking them again; a booking of a model the pod does not have loaded (as
    after its runtime restarted) is freed, else its room would count forever."""
    repo, ready_pool = await _fleet(kube_apiserver, kube_api, kubelet_factory, tmp_path)
    args = up_args(kubeconfig_path, activator_id="activator-0",
                   extra=["--leader-election", "off", *SHARED_FLAGS])  # fmt: skip
    first = await asyncio.to_thread(UpProcess, repo, *args)
    try:
        async with aiohttp.ClientSession() as session:
            assert await _infer(session, first, "onnx_a") == 200
            assert await _infer(session, first, "onnx_b") == 200
        (pod,) = _hosts(first)
    finally:
        first.stop()
    booked = _booked(kube_apiserver, pod)
    assert set(booked) == {"onnx_a", "onnx_b"}  # left booked by the stop
    await _book_unloaded(kube_apiserver, kube_api, pod, "onnx_c")  # a stale entry
    idle_pool = ready_pool()

    second = await asyncio.to_thread(UpProcess, repo, *args)
    try:
        # Adopted at start: no request has reached this activator yet.
        for model in ("onnx_a", "onnx_b"):
            replicas = await eventually(lambda m=model: second.model(m)["replicas"] or None)
            assert [r["url"] for r in replicas] == [replicas[0]["url"]], replicas
        await eventually(lambda: set(_booked(kube_apiserver, pod)) == {"onnx_a", "onnx_b"})
        assert _booked(kube_apiserver, pod) == booked  # the same rooms, not booked twice
        async with aiohttp.ClientSession() as session:
            assert await _infer(session, second, "onnx_a") == 200
        assert _hosts(second) == {pod: ["onnx_a", "onnx_b"]}
        assert ready_pool() == idle_pool  # no pool pod claimed for it
        assert up_cold_starts(second, "onnx_a") == 0
    finally:
        second.stop()
    assert "Traceback" not in second.log(), second.log()


def up_cold_starts(up: UpProcess, model: str) -> int:
    """How many cold starts of `model` the activator's status lists."""
    return sum(1 for c in up.get("/thaw/status")["cold_starts"] if c["model"] == model)


async def test_a_follower_promoted_to_leader_frees_a_stale_booking(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubeconfig_path: Path,
    kubelet_factory: Callable[..., LocalKubelet],
    tmp_path: Path,
) -> None:
    """A booking the leader made but never loaded (it died in between) is found by the
    follower that takes over: as leader it looks at every shared model's bookings, as the
    leader does at its start, and frees those whose pod's runtime does not have the model;
    the rooms that are loaded stay booked."""
    repo, _ready_pool = await _fleet(kube_apiserver, kube_api, kubelet_factory, tmp_path)
    async with _two_activators(repo, kubeconfig_path) as ups:
        leader_id = str(await eventually(lambda: _lease_holder(kube_apiserver), timeout_s=30))
        async with aiohttp.ClientSession() as session:
            assert await _infer(session, ups[leader_id], "onnx_a") == 200
        (pod,) = _hosts(ups[leader_id])
        await _book_unloaded(kube_apiserver, kube_api, pod, "onnx_c")
        assert set(_booked(kube_apiserver, pod)) == {"onnx_a", "onnx_c"}
        ups.pop(leader_id).stop()  # the follower takes over within the lease
        (follower_id,) = ups

        def promoted() -> bool:
            return _lease_holder(kube_apiserver) == follower_id

        await eventually(promoted, timeout_s=30)
        await eventually(lambda: set(_booked(kube_apiserver, pod)) == {"onnx_a"}, timeout_s=30)
        assert "booked but not loaded; unbooked" in ups[follower_id].log()


async def test_a_shared_pods_budget_is_capped_by_its_memory_limit(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubeconfig_path: Path,
    kubelet_factory: Callable[..., LocalKubelet],
    tmp_path: Path,
) -> None:
    """A budget (the flag's 64 GiB) larger than the pod's runtime container may hold (its
    `limits.memory`, 4 GiB) would have the kernel kill the pod with every model on it: the
    pod's booked budget is its limit less what its runtime holds of its own."""
    limit = 4 << 30
    repo, _ready_pool = await _fleet(
        kube_apiserver, kube_api, kubelet_factory, tmp_path, memory_limit="4Gi"
    )
    flags = ["--shared-replica-bytes", str(64 << 30), "--evict-grace-s", str(EVICT_GRACE_S)]
    args = up_args(kubeconfig_path, activator_id="activator-0",
                   extra=["--leader-election", "off", *flags])  # fmt: skip
    up = await asyncio.to_thread(UpProcess, repo, *args)
    try:
        async with aiohttp.ClientSession() as session:
            assert await _infer(session, up, "onnx_a") == 200
        (pod,) = _hosts(up)
        load = load_of(kube_apiserver.get("pods", NAMESPACE, pod) or {})
        assert load is not None
        # Less the runtime's own resident memory (a Python server with onnxruntime: well
        # over 10 MiB, well under 2 GiB), not the flag's 64 GiB.
        assert limit - (2 << 30) < load.budget_bytes < limit - (10 << 20), load
        assert "its memory limit less the runtime's own" in up.log()
    finally:
        up.stop()
    assert "Traceback" not in up.log(), up.log()
