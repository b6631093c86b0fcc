"""Fault injection on the fake API server: 429 with Retry-After, 500, delays, dropped
connections, on plain requests and on watches."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client import ApiException

from tests.fakes.kube_apiserver import FakeKubeApiServer
from tests.fakes.kube_faults import FaultAction

NS = "default"


async def test_next_requests_fail_with_429_then_succeed(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    core = client.CoreV1Api(kube_api)
    kube_apiserver.faults.fail("list", "pods", code=429, times=2, retry_after_s=3)
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            await core.list_namespaced_pod(NS)
        assert err.value.status == 429 and err.value.headers["Retry-After"] == "3"
        body = json.loads(err.value.body)
        assert body["reason"] == "TooManyRequests" and body["details"]["retryAfterSeconds"] == 3
    await core.list_namespaced_pod(NS)
    await core.list_namespaced_config_map(NS)  # other resources were never affected


async def test_500_on_one_verb_only(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    core = client.CoreV1Api(kube_api)
    kube_apiserver.faults.fail("patch", "pods/status", code=500)
    await core.create_namespaced_pod(
        NS, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    )
    await core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"a": "1"}}})
    with pytest.raises(ApiException) as err:
        await core.patch_namespaced_pod_status("p", NS, {"status": {"phase": "Running"}})
    assert err.value.status == 500 and json.loads(err.value.body)["reason"] == "InternalError"
    assert (
        await core.patch_namespaced_pod_status("p", NS, {"status": {"phase": "Running"}})
    ).status.phase == "Running"


async def test_delay(kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_api)
    kube_apiserver.faults.delay("get", "*", 0.3)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(ApiException):
        await core.read_namespaced_pod("missing", NS)
    assert loop.time() - started >= 0.3


async def test_dropped_connection(kube_apiserver: FakeKubeApiServer) -> None:
    """aiohttp (under kubernetes-asyncio) retries an idempotent request once on a dropped
    connection (RFC 9112 section 9.3.1.1), so one drop is invisible and two surface."""
    headers = {"Authorization": "Bearer thaw-fake-token"}
    url = kube_apiserver.url + f"/api/v1/namespaces/{NS}/pods"
    kube_apiserver.faults.drop("list", "pods")
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.get(url) as resp:
            assert resp.status == 200
        assert kube_apiserver.faults.fired == [("list", "pods", FaultAction.DROP)]
        kube_apiserver.faults.drop("list", "pods", times=2)
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await session.get(url)
    assert len(kube_apiserver.faults.fired) == 3


async def test_fault_on_watch_reaches_the_watch_client(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    """A non-200 watch answer is one Status line, which `Watch` raises as ApiException."""
    core = client.CoreV1Api(kube_api)
    kube_apiserver.faults.fail("watch", "pods", code=429)
    with pytest.raises(ApiException) as err:
        async with watch.Watch() as stream:
            async for _ in stream.stream(core.list_namespaced_pod, NS, timeout_seconds=5):
                pass
    assert err.value.status == 429


async def test_injected_conflict_reads_as_a_real_one(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_config_map(NS, {"metadata": {"name": "c"}})
    kube_apiserver.faults.fail("patch", "configmaps", code=409)
    with pytest.raises(ApiException) as err:
        await core.patch_namespaced_config_map("c", NS, {"data": {"a": "1"}})
    assert (err.value.status, json.loads(err.value.body)["reason"]) == (409, "Conflict")
