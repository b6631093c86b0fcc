"""A model pod no node can take, on the fake Kubernetes with its scheduler (issue 22): the
start holds through node provisioning — the pod Pending/Unschedulable first, "waiting for a
node" said and counted, past the activation timeout — and serves once a node appears; with no
node within the node-provisioning timeout it fails, saying why.

The warm pool is empty (a node autoscaler scaled it away with its nodes), so the start creates
a model pod from the pool's template; the test's scheduler has no node until the test adds
one, and the kubelet of that node then runs the pod (a real `thaw serve`). Time is a stepped
clock where the policy reads it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from activator.errors import ActivationFailed
from activator.observe.metrics import Metrics
from activator.scaler.kubernetes.backend import KubernetesBackend
from activator.scaler.kubernetes.pod_state import LABEL_MODEL, unschedulable
from tests.fakes.clock import FakeClock
from tests.fakes.kube_apiserver import FakeKubeApiServer
from tests.fakes.kube_fixtures import eventually
from tests.fakes.kubelet import LocalKubelet
from tests.fixtures.kube_fleet import NAMESPACE, fast_config, pool_deployment
from tests.fixtures.models import make_add_sub

pytestmark = pytest.mark.integration

MODEL = "add_sub"
ACTIVATION_S = 20.0
NODE_S = 120.0


@pytest.fixture
def kube_apiserver(kube_apiserver_factory: Callable[..., FakeKubeApiServer]) -> FakeKubeApiServer:
    return kube_apiserver_factory(scheduler=True)  # no node until a test adds one


@pytest.fixture
async def backend(
    kube_api: client.ApiClient,
    kubelet_factory: Callable[..., LocalKubelet],
    tmp_path: Path,
) -> AsyncIterator[tuple[KubernetesBackend, Metrics, FakeClock]]:
    repo = tmp_path / "repo"
    make_add_sub(repo)
    # The node's kubelet runs whatever is bound to thaw-node-1; only the scheduler binds.
    kubelet_factory(host_paths={"/models": repo, "/cache": tmp_path / "cache"}, schedule=False)
    await client.AppsV1Api(kube_api).create_namespaced_deployment(NAMESPACE, pool_deployment(0))
    metrics, clock = Metrics(), FakeClock()
    async with aiohttp.ClientSession() as session:
        backend = KubernetesBackend(
            fast_config(models=(MODEL,), leader_election=False, node_provisioning_timeout_s=NODE_S),
            session, metrics, drain_timeout_s=1.0, api_client=kube_api, clock=clock,
        )  # fmt: skip
        await backend.start()
        try:
            yield backend, metrics, clock
        finally:
            await backend.close()


def _model_pods(server: FakeKubeApiServer) -> list[dict[str, Any]]:
    return [
        p
        for p in server.objects("pods", NAMESPACE)
        if (p["metadata"].get("labels") or {}).get(LABEL_MODEL) == MODEL
    ]


def _sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def test_a_start_holds_through_node_provisioning_and_serves_when_a_node_appears(
    kube_apiserver: FakeKubeApiServer,
    backend: tuple[KubernetesBackend, Metrics, FakeClock],
) -> None:
    scaler, metrics, clock = backend
    start = asyncio.ensure_future(scaler.start_replica(MODEL, timeout_s=ACTIVATION_S))
    await eventually(lambda: scaler.waiting_for_node(MODEL), timeout_s=10)
    (pod,) = _model_pods(kube_apiserver)
    assert unschedulable(pod) == "0/0 nodes are available: no nodes available to schedule pods."
    assert _sample(metrics, "thaw_kube_pods_waiting_for_node", model=MODEL) == 1
    began = clock()
    clock.advance(ACTIVATION_S + 10)  # past the activation timeout: still held, for a node
    hold = scaler.hold_until(MODEL)
    assert hold is not None and hold >= began + NODE_S
    await asyncio.sleep(0.3)  # a few of the start's looks (every 0.5 s or on a pod event)
    assert not start.done()
    kube_apiserver.add_node("thaw-node-1")  # the node autoscaler's node joins
    handle = await asyncio.wait_for(start, 90)
    assert handle.id == pod["metadata"]["name"]
    assert not scaler.waiting_for_node(MODEL)
    assert _sample(metrics, "thaw_kube_pods_waiting_for_node", model=MODEL) == 0
    assert _sample(metrics, "thaw_kube_node_waits_total", model=MODEL, outcome="scheduled") == 1
    assert scaler.hold_until(MODEL) is None  # the start is over: nothing holds any more


async def test_no_node_within_the_node_provisioning_timeout_fails_the_start_saying_why(
    kube_apiserver: FakeKubeApiServer,
    backend: tuple[KubernetesBackend, Metrics, FakeClock],
) -> None:
    scaler, metrics, clock = backend
    start = asyncio.ensure_future(scaler.start_replica(MODEL, timeout_s=ACTIVATION_S))
    await eventually(lambda: scaler.waiting_for_node(MODEL), timeout_s=10)
    clock.advance(NODE_S)
    with pytest.raises(ActivationFailed, match=r"no node took pod .* within 120 s"):
        await asyncio.wait_for(start, 10)
    assert _sample(metrics, "thaw_kube_node_waits_total", model=MODEL, outcome="timed_out") == 1
    assert not scaler.waiting_for_node(MODEL)
    await eventually(lambda: not _model_pods(kube_apiserver), timeout_s=10)  # deleted
