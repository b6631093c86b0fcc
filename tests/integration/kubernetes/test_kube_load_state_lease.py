"""Explicit mode's load state shared through the fleet's Lease (activator.scaler.kubernetes.
load_state_lease) against the fake API server: a write on one activator is read by another
within its period; writes at once lose no change (409 → read again, apply again); an API
server that fails keeps the last known state in force and refuses writes with 503."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from kubernetes_asyncio import client

from activator.errors import ScalerUnavailable
from activator.scaler.kubernetes.api import KubeApi
from activator.scaler.kubernetes.backoff import Backoff
from activator.scaler.kubernetes.load_state_doc import ANNOTATION_LOAD_STATE
from activator.scaler.kubernetes.load_state_lease import LoadStateLease
from tests.fakes.kube_apiserver import FakeKubeApiServer
from tests.fakes.kube_fixtures import eventually
from tests.fakes.loop import HUNG_AFTER_S

pytestmark = pytest.mark.integration

NS = "thaw"
NAME = "thaw-activator-leader-load-state"
PERIOD_S = 0.1


def _lease(api: KubeApi, told: list[Mapping[str, str]], *, timeout_s: float = 5) -> LoadStateLease:
    lease = LoadStateLease(
        api, NAME, fleet="thaw", period_s=PERIOD_S, timeout_s=timeout_s,
        backoff=Backoff(0.02, 0.1), rng=random.Random(1),
    )  # fmt: skip
    lease.watch(lambda changed: told.append(dict(changed)))
    return lease


def _document(server: FakeKubeApiServer) -> dict[str, Any]:
    lease = server.get("leases", NS, NAME)
    assert lease is not None
    return dict(json.loads(lease["metadata"]["annotations"][ANNOTATION_LOAD_STATE]))


@contextlib.asynccontextmanager
async def _running(*leases: LoadStateLease) -> AsyncIterator[None]:
    tasks = [asyncio.ensure_future(lease.run()) for lease in leases]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_write_on_one_activator_is_read_by_the_other(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    api = KubeApi(kube_api, NS, timeout_s=5)
    told_a: list[Mapping[str, str]] = []
    told_b: list[Mapping[str, str]] = []
    a, b = _lease(api, told_a), _lease(api, told_b)
    await a.read()
    await b.read()  # no Lease yet: nothing known, nothing told
    assert a.states == {} and told_b == []
    async with _running(a, b):
        await a.write({"m": "loaded"})  # creates the Lease
        assert a.states == {"m": "loaded"}
        await eventually(lambda: b.states == {"m": "loaded"}, timeout_s=HUNG_AFTER_S)
        assert told_b == [{"m": "loaded"}]
        await b.write({"m": "unloaded"})  # replaces it, with the resourceVersion read
        await eventually(lambda: a.states == {"m": "unloaded"}, timeout_s=HUNG_AFTER_S)
        assert told_a == [{"m": "unloaded"}]  # its own write was not told back to it
    assert _document(kube_apiserver) == {"generation": 2, "models": {"m": "unloaded"}}
    lease = kube_apiserver.get("leases", NS, NAME)
    assert lease is not None and lease["metadata"]["labels"] == {"thaw.dev/fleet": "thaw"}


async def test_writes_at_once_from_several_activators_lose_no_change(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    api = KubeApi(kube_api, NS, timeout_s=5)
    leases = [_lease(api, []) for _ in range(4)]
    await leases[0].write({"seed": "loaded"})
    await asyncio.gather(*(lease.write({f"m{i}": "loaded"}) for i, lease in enumerate(leases)))
    document = _document(kube_apiserver)
    assert document["models"] == {"seed": "loaded", **{f"m{i}": "loaded" for i in range(4)}}
    assert document["generation"] == 5
    conflicts = [r for r in kube_apiserver.requests if r.verb == "update" and r.status == 409]
    assert conflicts, "the writes did not meet: nothing was tried"


async def test_an_api_server_that_fails_keeps_the_state_and_refuses_writes_with_503(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    api = KubeApi(kube_api, NS, timeout_s=1)
    told: list[Mapping[str, str]] = []
    a = _lease(api, told, timeout_s=1)
    await a.write({"m": "unloaded"})
    kube_apiserver.faults.fail("get", "leases", code=503, times=1_000_000)
    async with _running(a):
        await eventually(lambda: a.view.failing_since is not None, timeout_s=HUNG_AFTER_S)
        assert a.states == {"m": "unloaded"}  # the last known state stays in force
        with pytest.raises(ScalerUnavailable) as refused:
            await a.write({"m": "loaded"})
        assert refused.value.status == 503
        assert f"Lease {NS}/{NAME}" in refused.value.message
        assert "unchanged" in refused.value.message
        assert a.states == {"m": "unloaded"}
        kube_apiserver.faults.clear()
        await eventually(lambda: a.view.failing_since is None, timeout_s=HUNG_AFTER_S)
    assert _document(kube_apiserver)["models"] == {"m": "unloaded"}
    assert told == []


def _lease_reads(server: FakeKubeApiServer) -> int:
    return sum(1 for r in server.requests if r.verb == "get" and r.resource == "leases")


async def test_a_refresh_reads_what_another_activator_wrote_before_the_next_period(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    """A client's load answered by A, its next request on B: B reads the Lease for it, not at
    its next periodic read (never, here: B's `run` is not running)."""
    api = KubeApi(kube_api, NS, timeout_s=5)
    told_b: list[Mapping[str, str]] = []
    a, b = _lease(api, []), _lease(api, told_b)
    await b.read()
    await a.write({"m": "loaded"})
    assert b.states == {}
    await asyncio.wait_for(b.refresh(), HUNG_AFTER_S)
    assert b.states == {"m": "loaded"} and told_b == [{"m": "loaded"}]


async def test_refreshes_at_once_share_their_reads(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    """A burst of requests for a model no activator loaded costs the API server a read or two
    (the one in flight, and one begun after it for the requests that came after it began),
    not one each; each request is answered after a read begun after it arrived."""
    api = KubeApi(kube_api, NS, timeout_s=5)
    a, b = _lease(api, []), _lease(api, [])
    await a.write({"m": "unloaded"})
    before = _lease_reads(kube_apiserver)
    await asyncio.wait_for(asyncio.gather(*(b.refresh() for _ in range(50))), HUNG_AFTER_S)
    first = _lease_reads(kube_apiserver) - before
    assert 1 <= first <= 2
    # A write after those reads: refreshes asked now begin a read of their own, after the
    # interval, and see it.
    await a.write({"m": "loaded"})
    before = _lease_reads(kube_apiserver)
    await asyncio.wait_for(asyncio.gather(*(b.refresh() for _ in range(50))), HUNG_AFTER_S)
    assert 1 <= _lease_reads(kube_apiserver) - before <= 2
    assert b.states == {"m": "loaded"}


async def test_a_refresh_that_cannot_read_keeps_the_last_state_and_returns(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    api = KubeApi(kube_api, NS, timeout_s=1)
    a = _lease(api, [], timeout_s=1)
    await a.write({"m": "unloaded"})
    kube_apiserver.faults.fail("get", "leases", code=503, times=1_000_000)
    await asyncio.wait_for(a.refresh(), HUNG_AFTER_S)  # the request is answered, not hung
    assert a.states == {"m": "unloaded"} and a.view.failing_since is not None
    # While reads fail, a refresh does not try again: requests are not held for the API.
    reads = _lease_reads(kube_apiserver)
    await asyncio.wait_for(asyncio.gather(*(a.refresh() for _ in range(10))), HUNG_AFTER_S)
    assert _lease_reads(kube_apiserver) == reads
    # The next periodic read that succeeds ends it.
    kube_apiserver.faults.clear()
    async with _running(a):
        await eventually(lambda: a.view.failing_since is None, timeout_s=HUNG_AFTER_S)
    await a.refresh()
    assert _lease_reads(kube_apiserver) > reads + 1
