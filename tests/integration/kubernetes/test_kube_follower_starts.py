"""A follower's replica start on the fake Kubernetes (issue 21, defect 2): a request to the
scaling leader, never a start of its own. It waits while a request waits, is withdrawn (no
failure, no pod) when the demand goes or when this activator becomes the leader, and a pod the
leader claimed satisfies it even past the start's deadline.

Pods here run nothing: the test plays the leader (its Lease, its claimed pod, the pod's state
and readiness through the API), and one in-process runtime answers the readiness probes of
every pod on 127.0.0.1. Time is a stepped clock; the races are driven by API writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from kubernetes_asyncio import client

from activator.errors import StartWithdrawn
from activator.observe.metrics import Metrics
from activator.scaler.kubernetes.api import KubeApi
from activator.scaler.kubernetes.backend import KubernetesBackend
from activator.scaler.kubernetes.leader_lease import lease_body
from activator.scaler.kubernetes.pod_state import (
    ANNOTATION_CLAIMED_BY,
    ANNOTATION_MODEL,
    ANNOTATION_STATE,
    LABEL_FLEET,
    LABEL_MODEL,
)
from tests.fakes.clock import FakeClock
from tests.fakes.kube_apiserver import FakeKubeApiServer
from tests.fakes.kube_fixtures import eventually
from tests.fakes.kube_manifests import pod, python_container
from tests.fixtures.kube_fleet import NAMESPACE, POOL_SELECTOR, fast_config, pool_deployment

pytestmark = pytest.mark.integration

MODEL = "add_sub"
LEASE = "thaw-activator-leader"
LOOKS_S = 0.3  # three of the follower's looks (every 0.1 s): long enough to have failed


@pytest.fixture
async def runtime_port() -> AsyncIterator[int]:
    """A runtime on 127.0.0.1 that is ready and serves MODEL (every test pod's address)."""

    async def ok(request: web.Request) -> web.Response:
        return web.json_response({})

    app = web.Application()
    app.add_routes([web.get("/v2/health/ready", ok), web.get(f"/v2/models/{MODEL}/ready", ok)])
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
    await runner.cleanup()


async def _leader_elsewhere(api: KubeApi) -> None:
    """The Lease held by another activator for an hour (it never expires in a test)."""
    body = lease_body(
        LEASE, holder="leader-x", duration_s=3600, transitions=0, acquire_time=None,
        peer_url="http://127.0.0.1:9", resource_version=None,
    )  # fmt: skip
    await api.create_lease(body)


async def _release_lease(api: KubeApi) -> None:
    """The leader lets go (holder ""): the follower takes the Lease at its next look."""
    lease = await api.read_lease(LEASE)
    assert lease is not None
    body = lease_body(
        LEASE, holder="", duration_s=1, transitions=0, acquire_time=None, peer_url=None,
        resource_version=lease["metadata"]["resourceVersion"],
    )  # fmt: skip
    await api.replace_lease(LEASE, body)


async def _claimed_pod(core: client.CoreV1Api, name: str) -> None:
    """A pod the leader claimed for MODEL, still loading (no address yet)."""
    manifest = pod(name, python_container("pass"), labels={LABEL_FLEET: "thaw", LABEL_MODEL: MODEL})
    manifest["metadata"]["annotations"] = {
        ANNOTATION_MODEL: MODEL,
        ANNOTATION_STATE: "loading",
        ANNOTATION_CLAIMED_BY: "leader-x",
    }
    await core.create_namespaced_pod(NAMESPACE, manifest)


async def _ready(core: client.CoreV1Api, name: str) -> None:
    """The pod runs and is Ready at 127.0.0.1 (where the test's runtime answers)."""
    status = {
        "status": {
            "phase": "Running",
            "podIP": "127.0.0.1",
            "conditions": [{"type": "Ready", "status": "True"}],
        }
    }
    await core.patch_namespaced_pod_status(name, NAMESPACE, status)


async def _serving(core: client.CoreV1Api, name: str) -> None:
    """The leader's load returned: the pod is ready at 127.0.0.1 and marked serving."""
    await _ready(core, name)
    state = {"metadata": {"annotations": {ANNOTATION_STATE: "serving"}}}
    await core.patch_namespaced_pod(name, NAMESPACE, state)


def _pod_writes(server: FakeKubeApiServer, name: str = "") -> list[Any]:
    """Pod creates and patches the backend sent (claims, model pods), but the test's own."""

    def target(r: Any) -> str:
        body = r.body if isinstance(r.body, dict) else {}
        return str(r.name or body.get("metadata", {}).get("name", ""))

    return [
        r
        for r in server.requests
        if r.resource == "pods" and r.verb in ("create", "patch") and target(r) != name
    ]


@pytest.fixture
async def follower(
    kube_api: client.ApiClient, runtime_port: int
) -> AsyncIterator[tuple[KubernetesBackend, KubeApi, FakeClock]]:
    api = KubeApi(kube_api, NAMESPACE, timeout_s=5)
    await client.AppsV1Api(kube_api).create_namespaced_deployment(NAMESPACE, pool_deployment(0))
    await _leader_elsewhere(api)
    clock = FakeClock()
    async with aiohttp.ClientSession() as session:
        backend = KubernetesBackend(
            fast_config(
                models=(MODEL,), activator_id="follower", runtime_port=runtime_port,
                lease_duration_s=1,
            ),
            session, Metrics(), drain_timeout_s=1.0, api_client=kube_api, clock=clock,
        )  # fmt: skip
        await backend.start()
        try:
            await eventually(lambda: backend._election and backend._election.holder, timeout_s=5)
            assert not backend.leading
            yield backend, api, clock
        finally:
            await backend.close()


async def test_a_followers_start_is_withdrawn_when_no_request_waits_any_more(
    kube_apiserver: FakeKubeApiServer,
    follower: tuple[KubernetesBackend, KubeApi, FakeClock],
) -> None:
    backend, _, _ = follower
    backend.exchange(MODEL, mean=0.0, current=1)  # a request held here
    start = asyncio.ensure_future(backend.start_replica(MODEL, timeout_s=60))
    await asyncio.sleep(LOOKS_S)
    assert not start.done()  # it waits for the leader while the request waits
    backend.exchange(MODEL, mean=0.0, current=0)  # the request went (served, or gave up)
    with pytest.raises(StartWithdrawn, match="no request waits"):
        await asyncio.wait_for(start, 5)  # before the fix: an orphan, waiting its 60 s out
    assert _pod_writes(kube_apiserver) == []


async def test_a_pod_the_leader_claimed_satisfies_a_followers_start_past_its_deadline(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    follower: tuple[KubernetesBackend, KubeApi, FakeClock],
) -> None:
    backend, _, clock = follower
    core = client.CoreV1Api(kube_api)
    await _claimed_pod(core, "model-pod")
    await eventually(lambda: len(backend._loading_pods(MODEL)) == 1, timeout_s=5)
    backend.exchange(MODEL, mean=0.0, current=1)
    start = asyncio.ensure_future(backend.start_replica(MODEL, timeout_s=60))
    clock.advance(61)  # past the start's deadline while the leader's pod still loads
    await asyncio.sleep(LOOKS_S)
    # Before the fix: ActivationFailed "... the scaling leader did not start one", failing
    # the requests held here, although the leader had claimed a pod for the model.
    assert not start.done()
    await _serving(core, "model-pod")
    handle = await asyncio.wait_for(start, 5)
    assert handle.id == "model-pod" and handle.model == MODEL
    assert _pod_writes(kube_apiserver, "model-pod") == []


async def test_a_follower_that_becomes_leader_withdraws_its_start_and_creates_no_pod(
    kube_apiserver: FakeKubeApiServer,
    follower: tuple[KubernetesBackend, KubeApi, FakeClock],
) -> None:
    backend, api, _ = follower
    backend.exchange(MODEL, mean=0.0, current=1)
    start = asyncio.ensure_future(backend.start_replica(MODEL, timeout_s=60))
    await asyncio.sleep(LOOKS_S)
    assert not start.done()
    await _release_lease(api)
    # Before the fix the same start went on as a leader's bring-up: it created a pod
    # (here, with an empty pool) whatever the demand by then. Now it ends, and the endpoint
    # decides again as leader (tests/unit/activator/kubernetes/test_peer_concurrency.py).
    with pytest.raises(StartWithdrawn, match="role changed"):
        await asyncio.wait_for(start, 10)
    assert backend.leading
    assert _pod_writes(kube_apiserver) == []


async def test_a_follower_attaches_the_leaders_pod_as_soon_as_it_answers_before_its_mark(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    follower: tuple[KubernetesBackend, KubeApi, FakeClock],
) -> None:
    # Issue 21, defect 4: the leader's load returned (the runtime answers the model ready)
    # but its `serving` mark has not come through the watch yet. Readiness is probed on the
    # pod itself: the follower serves from it now instead of a watch event later.
    backend, _, _ = follower
    core = client.CoreV1Api(kube_api)
    await _claimed_pod(core, "loaded-pod")
    await _ready(core, "loaded-pod")
    backend.exchange(MODEL, mean=0.0, current=1)
    handle = await asyncio.wait_for(backend.start_replica(MODEL, timeout_s=60), 5)
    assert handle.id == "loaded-pod"
    pod = kube_apiserver.get("pods", NAMESPACE, "loaded-pod")
    assert pod is not None and pod["metadata"]["annotations"][ANNOTATION_STATE] == "loading"


async def test_a_follower_that_becomes_leader_marks_the_lost_leaders_pod_it_serves(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    follower: tuple[KubernetesBackend, KubeApi, FakeClock],
) -> None:
    # The leader claimed a pool pod and loaded the model; this follower attached the pod as
    # soon as it answered; the leader died before writing its `serving` mark. Before the fix
    # nobody ever wrote it: the pod served this activator's requests while marked `loading`
    # and still in its pool (the ReplicaSet one warm pod short, no other activator attaching).
    backend, api, _ = follower
    core = client.CoreV1Api(kube_api)
    await _claimed_pod(core, "lost-pod")
    await core.patch_namespaced_pod(
        "lost-pod", NAMESPACE, {"metadata": {"labels": dict(POOL_SELECTOR)}}
    )
    await _ready(core, "lost-pod")
    backend.exchange(MODEL, mean=0.0, current=1)
    handle = await asyncio.wait_for(backend.start_replica(MODEL, timeout_s=60), 5)
    assert handle.id == "lost-pod"
    await _release_lease(api)  # the leader is gone: this activator leads now

    def marked() -> bool:
        pod = kube_apiserver.get("pods", NAMESPACE, "lost-pod")
        assert pod is not None
        labels = pod["metadata"].get("labels") or {}
        state = pod["metadata"]["annotations"][ANNOTATION_STATE]
        return state == "serving" and not set(POOL_SELECTOR) & set(labels)

    await eventually(marked, timeout_s=10)
    assert backend.leading
