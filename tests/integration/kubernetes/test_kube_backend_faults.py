"""The Kubernetes backend under bad input and faults: a pod that never becomes ready, a pod
killed mid-request, API errors and dropped watches, RBAC forbidden at start, two activators
racing for one pool pod, a model name that is not a label value."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from activator.errors import ActivationFailed
from activator.observe.metrics import Metrics
from activator.scaler.kubernetes.backend import KubernetesBackend
from activator.scaler.kubernetes.model_labels import label_value
from activator.scaler.kubernetes.pod_state import LABEL_MODEL, is_ready
from tests.fakes.kube_apiserver import FakeKubeApiServer
from tests.fakes.kube_authz import PolicyRule
from tests.fakes.kube_fixtures import eventually
from tests.fakes.kube_manifests import python_container
from tests.fakes.kubelet import LocalKubelet
from tests.fakes.loop import HUNG_AFTER_S
from tests.fixtures.kube_fleet import (
    NAMESPACE,
    POOL_SELECTOR,
    fast_config,
    pool_deployment,
    up_args,
)
from tests.fixtures.models import make_add_sub, make_slow_execute
from tests.fixtures.up_process import UpProcess, with_params

pytestmark = pytest.mark.integration

ODD_NAME = "_odd.Name-"  # a valid Thaw model name, not a valid label value


def _pool_pods(server: FakeKubeApiServer) -> list[dict[str, Any]]:
    return [
        p
        for p in server.objects("pods", NAMESPACE)
        if all((p["metadata"].get("labels") or {}).get(k) == v for k, v in POOL_SELECTOR.items())
    ]


def _model_pods(server: FakeKubeApiServer, label: str) -> list[dict[str, Any]]:
    return [
        p
        for p in server.objects("pods", NAMESPACE)
        if (p["metadata"].get("labels") or {}).get(LABEL_MODEL) == label
    ]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    make_add_sub(repo)
    make_add_sub(repo, ODD_NAME)
    with_params(
        make_slow_execute(repo, "slow", delay_s=3.0, hold_file=_slow_hold(tmp_path)),
        direct_connections="false",
    )
    return repo


def _slow_hold(tmp_path: Path) -> Path:
    """While this file exists, the `slow` model's calls execute until it is removed (for at
    most the seconds written in it), not 3 s: a test holds the call it kills a pod in."""
    return tmp_path / "slow.hold"


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def _pool(
    api: client.ApiClient,
    server: FakeKubeApiServer,
    kubelet_factory: Callable[..., LocalKubelet],
    repo: Path,
    tmp_path: Path,
    replicas: int,
    **deployment: Any,
) -> LocalKubelet:
    kubelet = kubelet_factory(host_paths={"/models": repo, "/cache": tmp_path / "cache"})
    manifest = pool_deployment(replicas, **deployment)
    await client.AppsV1Api(api).create_namespaced_deployment(NAMESPACE, manifest)
    if replicas:
        await eventually(
            lambda: sum(is_ready(p) for p in _pool_pods(server)) == replicas, timeout_s=60
        )
    return kubelet


def _backend(
    api: client.ApiClient, session: aiohttp.ClientSession, metrics: Metrics, **config: Any
) -> KubernetesBackend:
    config.setdefault("models", ("add_sub", ODD_NAME, "slow"))
    config.setdefault("leader_election", False)
    return KubernetesBackend(
        fast_config(**config), session, metrics, drain_timeout_s=2.0, api_client=api
    )


def _sample(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return value or 0.0


async def test_two_activators_racing_for_one_pool_pod_never_share_it(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubelet_factory: Callable[..., LocalKubelet],
    repo: Path,
    tmp_path: Path,
    session: aiohttp.ClientSession,
) -> None:
    await _pool(kube_api, kube_apiserver, kubelet_factory, repo, tmp_path, 1)
    metrics_a, metrics_b = Metrics(), Metrics()
    a = _backend(kube_api, session, metrics_a, activator_id="a")
    b = _backend(kube_api, session, metrics_b, activator_id="b")
    await asyncio.gather(a.start(), b.start())
    try:
        one, two = await asyncio.gather(
            a.start_replica("add_sub", timeout_s=60), b.start_replica("add_sub", timeout_s=60)
        )
        assert one.id != two.id
        claimed = sum(
            _sample(m, "thaw_kube_pod_claims_total", model="add_sub", placement_class="default",
                    result="claimed")
            for m in (metrics_a, metrics_b)
        )  # fmt: skip
        conflicts = sum(
            _sample(
                m,
                "thaw_kube_pod_claims_total",
                model="add_sub",
                placement_class="default",
                result="conflict",
            )
            for m in (metrics_a, metrics_b)
        )
        misses = sum(
            _sample(m, "thaw_kube_pool_misses_total", model="add_sub", placement_class="default")
            for m in (metrics_a, metrics_b)
        )
        # One won the pool pod; the loser was refused (409) and made a model pod itself.
        assert (claimed, conflicts, misses) == (1, 1, 1)
        owners = {p["metadata"]["annotations"]["thaw.dev/claimed-by"]
                  for p in _model_pods(kube_apiserver, "add_sub")}  # fmt: skip
        assert owners == {"a", "b"}
    finally:
        await asyncio.gather(a.close(), b.close())


async def test_a_model_name_that_is_no_label_value_is_mapped_and_served(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubelet_factory: Callable[..., LocalKubelet],
    repo: Path,
    tmp_path: Path,
    session: aiohttp.ClientSession,
) -> None:
    await _pool(kube_api, kube_apiserver, kubelet_factory, repo, tmp_path, 1)
    backend = _backend(kube_api, session, Metrics())
    await backend.start()
    try:
        handle = await backend.start_replica(ODD_NAME, timeout_s=60)
        (pod,) = _model_pods(kube_apiserver, label_value(ODD_NAME))
        assert label_value(ODD_NAME) != ODD_NAME
        assert pod["metadata"]["annotations"]["thaw.dev/model"] == ODD_NAME
        async with session.get(f"{handle.url}/v2/models/{ODD_NAME}/ready") as resp:
            assert resp.status == 200
        # Found again by its label after a restart of the backend.
        again = _backend(kube_api, session, Metrics())
        await again.start()
        try:
            assert [h.id for h in await again.running_replicas(ODD_NAME)] == [handle.id]
            assert await again.running_replicas("add_sub") == []
        finally:
            await again.close()
    finally:
        await backend.close()


_ADD_SUB_BODY = {
    "inputs": [
        {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1] * 4},
        {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": [1] * 4},
    ]
}


def _runtime_that(code: str) -> dict[str, Any]:
    """A pool pod template whose runtime container runs `code` instead of `thaw serve`."""
    container = python_container(code)
    container["ports"] = [{"name": "http", "containerPort": 8000}]
    container["readinessProbe"] = {"httpGet": {"path": "/v2/health/ready", "port": "http"}}
    return container


@pytest.mark.parametrize(
    ("runtime", "status", "words"),
    [
        # Hangs: never answers; the held requests' deadline (activation timeout) ends it.
        ("import time; time.sleep(600)", 504, "did not become ready within"),
        # Crashes at start: the restart says it will not come up, without waiting it out.
        ("import sys; sys.exit(3)", 503, "restarted its runtime"),
    ],
    ids=["hangs", "crashes"],
)
async def test_a_pod_that_never_becomes_ready_fails_held_requests_and_is_deleted(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubeconfig_path: Path,
    kubelet_factory: Callable[..., LocalKubelet],
    repo: Path,
    tmp_path: Path,
    session: aiohttp.ClientSession,
    runtime: str,
    status: int,
    words: str,
) -> None:
    # The hang's 504 is the 4 s deadline's; the crash must be told without waiting a deadline
    # out, so it has one a loaded machine's slow restart report cannot reach.
    # The start's own limit (load_timeout_s) is set to the same: the hung pod's start ends there.
    deadline_s = 4 if status == 504 else HUNG_AFTER_S
    with_params(repo / "add_sub", activation_timeout_s=deadline_s, load_timeout_s=deadline_s)
    container = _runtime_that(runtime)
    await _pool(kube_api, kube_apiserver, kubelet_factory, repo, tmp_path, 0, container=container)
    up = await asyncio.to_thread(UpProcess, repo, *up_args(kubeconfig_path, activator_id="a"))
    try:
        url = f"{up.url}/v2/models/add_sub/infer"
        async with session.post(url, json=_ADD_SUB_BODY) as resp:
            assert resp.status == status
            error = (await resp.json())["error"]
        assert words in error, error
        # The pod is deleted, not left to crash-loop or hang.
        await eventually(lambda: not _model_pods(kube_apiserver, "add_sub"), timeout_s=15)
    finally:
        up.stop()


async def test_a_pod_killed_mid_request_answers_502_and_is_not_replayed(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubeconfig_path: Path,
    kubelet_factory: Callable[..., LocalKubelet],
    repo: Path,
    tmp_path: Path,
    session: aiohttp.ClientSession,
) -> None:
    kubelet = await _pool(kube_api, kube_apiserver, kubelet_factory, repo, tmp_path, 2)
    up = await asyncio.to_thread(UpProcess, repo, *up_args(kubeconfig_path, activator_id="a"))
    try:
        url = f"{up.url}/v2/models/slow/infer"
        body = {"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1] * 4}]}
        async with session.post(f"{up.url}/v2/repository/models/slow/load", json={}) as resp:
            assert resp.status == 200
        (pod,) = _model_pods(kube_apiserver, "slow")
        # Held in the model until the pod is killed (not a 3 s execute that a loaded machine
        # could let end first, answering 200).
        hold = _slow_hold(tmp_path)
        hold.write_text(str(HUNG_AFTER_S))
        try:
            request = asyncio.ensure_future(session.post(url, json=body))
            await asyncio.to_thread(  # proxied to the pod: in the model's execute
                up.wait_for,
                lambda: up.model("slow")["in_flight"] == 1,
                30,
                "the request in flight",
            )
            pid = kubelet.pid(NAMESPACE, pod["metadata"]["name"])
            assert pid is not None
            os.killpg(pid, signal.SIGKILL)
        finally:
            hold.unlink()  # the next replica's executes take 3 s again
        async with await request as resp:
            assert resp.status == 502, await resp.text()
            assert "error" in await resp.json()
        # The dead runtime is dropped (its container restarted holds no model) and the next
        # request gets a fresh replica.
        async with session.post(url, json=body) as resp:
            assert resp.status == 200
    finally:
        up.stop()


async def test_api_errors_and_dropped_watches_are_retried_and_nothing_is_lost(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubelet_factory: Callable[..., LocalKubelet],
    repo: Path,
    tmp_path: Path,
    session: aiohttp.ClientSession,
) -> None:
    await _pool(kube_api, kube_apiserver, kubelet_factory, repo, tmp_path, 2)
    metrics = Metrics()
    backend = _backend(kube_api, session, metrics)
    await backend.start()
    try:
        kube_apiserver.faults.fail("patch", "pods", code=500, times=1)
        kube_apiserver.faults.fail("patch", "pods", code=429, times=1, retry_after_s=1)
        first = await backend.start_replica("add_sub", timeout_s=60)
        assert _sample(metrics, "thaw_kube_api_retries_total", status="500") == 1
        assert _sample(metrics, "thaw_kube_api_retries_total", status="429") == 1
        # Watches end, drop and expire: the caches list again and still see every change.
        kube_apiserver.faults.drop("watch", "pods", times=2)
        kube_apiserver.compact()
        assert kube_apiserver.end_watches() >= 1
        second = await backend.start_replica("add_sub", timeout_s=60)
        assert second.id != first.id
        kube_apiserver.faults.delay("delete", "pods", 0.5, times=1)
        await backend.stop_replica(first.id, timeout_s=2)
        assert await asyncio.wait_for(backend.wait_lost(first.id), 5) == "stopped"
        await eventually(
            lambda: (
                [p["metadata"]["name"] for p in _model_pods(kube_apiserver, "add_sub")]
                == [second.id]
            ),
            timeout_s=15,
        )
    finally:
        await backend.close()


async def test_a_start_without_a_pool_deployment_or_a_pool_pod_in_time_fails_clearly(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    session: aiohttp.ClientSession,
) -> None:
    backend = _backend(kube_api, session, Metrics())
    with pytest.raises(Exception, match="no warm-pool Deployment 'thaw-pool' in namespace 'thaw'"):
        await backend.start()
    await backend.close()
    # Not started: a start is refused in words, not with an AttributeError.
    with pytest.raises(ActivationFailed, match="not started"):
        await backend.start_replica("add_sub", timeout_s=1)


def test_rbac_forbidden_stops_thaw_up_at_start_naming_the_missing_rights(
    kube_apiserver: FakeKubeApiServer, kubeconfig_path: Path, repo: Path
) -> None:
    kube_apiserver.set_rbac(
        [PolicyRule(verbs=("list", "watch"), resources=("pods",), api_groups=("",))]
    )
    args = up_args(kubeconfig_path, activator_id="a")
    done = subprocess.run(
        [sys.executable, "-m", "thaw.cli", "up", str(repo), "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    err = done.stderr
    assert "thaw up: error: kubernetes scaler: forbidden" in err, err
    for missing in (
        "create pods",
        "patch pods",
        "get apps/deployments",
        "update coordination.k8s.io/leases",
    ):
        assert missing in err
    assert "Traceback" not in err


@pytest.mark.parametrize("problem", ["unreachable", "no-kubeconfig", "peer-port-taken"])
def test_an_api_or_port_it_cannot_use_stops_thaw_up_at_start_in_words(
    kube_apiserver: FakeKubeApiServer,
    kubeconfig_path: Path,
    repo: Path,
    tmp_path: Path,
    problem: str,
) -> None:
    import socket

    args = up_args(kubeconfig_path, activator_id="a")
    taken = socket.socket()
    hint = ""
    if problem == "unreachable":
        config = tmp_path / "kubeconfig"
        config.write_text(
            kubeconfig_path.read_text().replace(kube_apiserver.url, "http://127.0.0.1:9")
        )
        args[args.index("--kubeconfig") + 1] = str(config)
        words = "kubernetes scaler: access review: Cannot connect to host 127.0.0.1:9"
    elif problem == "no-kubeconfig":
        args[args.index("--kubeconfig") + 1] = str(tmp_path / "missing")
        words = "kubernetes scaler: cannot load the kubeconfig"
        hint = "(give --kubeconfig FILE, or --in-cluster on inside a pod)"  # how to give one
    else:
        kube_apiserver_pool = pool_deployment(0)
        asyncio.run(_create(kube_apiserver, kube_apiserver_pool))
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        args[args.index("--peer-port") + 1] = str(taken.getsockname()[1])
        words = "cannot listen for peer reports on 127.0.0.1:"
    try:
        done = subprocess.run(
            [sys.executable, "-m", "thaw.cli", "up", str(repo), "--port", "0", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        taken.close()
    assert done.returncode == 1, done.stderr
    assert words in done.stderr and hint in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "Unclosed" not in done.stderr, done.stderr


async def _create(server: FakeKubeApiServer, manifest: dict[str, Any]) -> None:
    async with client.ApiClient(server.client_configuration()) as api:
        await client.AppsV1Api(api).create_namespaced_deployment(NAMESPACE, manifest)
