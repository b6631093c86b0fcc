"""The Lease, the pod cache and peer reports against the fake API server: one leader at a
time, hand-over on expiry and at once on release, MicroTime kept; the pod cache re-lists on
410 and after dropped watches and still sees every change; followers' reports reach the leader
over HTTP, bad ones are refused, demand wakes the leader."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from activator.observe.metrics import Metrics
from activator.scaler.backend import PeerLoad
from activator.scaler.kubernetes.api import KubeApi
from activator.scaler.kubernetes.backoff import Backoff
from activator.scaler.kubernetes.leader_election import LeaderElection
from activator.scaler.kubernetes.leader_lease import retry_period_s
from activator.scaler.kubernetes.peer_reports import REPORT_PATH, PeerReports
from activator.scaler.kubernetes.pod_informer import PodInformer
from tests.fakes.kube_apiserver import FakeKubeApiServer
from tests.fakes.kube_fixtures import eventually
from tests.fakes.kube_manifests import pod, python_container
from tests.fakes.loop import HUNG_AFTER_S

pytestmark = pytest.mark.integration

NS = "thaw"


@contextlib.asynccontextmanager
async def _running(*coros: Any) -> AsyncIterator[list[asyncio.Task[Any]]]:
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        yield tasks
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# The elections' lease: its timings are what the first test asserts, each within a window of
# about a lease; 3 s, since a loaded machine's stalled loop could outlast the windows of a 1 s
# lease (a renewal late, a takeover past a second expiry).
LEASE_S = 3


def _election(api: KubeApi, identity: str, seen: list[tuple[str, bool]]) -> LeaderElection:
    return LeaderElection(
        api, "lease", identity, duration_s=LEASE_S, peer_url=f"http://{identity}:1",
        on_change=lambda leading: seen.append((identity, leading)),
    )  # fmt: skip


async def test_one_leader_hand_over_on_expiry_and_on_release(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    api = KubeApi(kube_api, NS, timeout_s=5)
    seen: list[tuple[str, bool]] = []
    a, b = _election(api, "a", seen), _election(api, "b", seen)
    async with _running(a.run()) as (task_a,):
        await eventually(lambda: a.leading, timeout_s=5)
        async with _running(b.run()):
            await asyncio.sleep(1.5 * LEASE_S)  # more than a lease: a keeps renewing
            assert a.leading and not b.leading and b.leader_url == "http://a:1"
            lease = kube_apiserver.get("leases", NS, "lease")
            assert len(lease["spec"]["renewTime"].split(".")[1]) == 7  # microseconds kept + Z
            task_a.cancel()  # a dies without a word
            died = time.monotonic()
            await eventually(lambda: b.leading, timeout_s=HUNG_AFTER_S)
            # Not before a's lease could expire (its last renewal was at most a retry period
            # before it died), and at that expiry, not a second lease later.
            took = time.monotonic() - died
            assert LEASE_S - retry_period_s(LEASE_S) <= took < 2 * LEASE_S, took
            assert kube_apiserver.get("leases", NS, "lease")["spec"]["leaseTransitions"] == 1
            c = _election(api, "c", seen)
            async with _running(c.run()):
                await asyncio.sleep(0.3)
                assert not c.leading
                await b.release()  # a graceful stop: the next one takes over at once
                released = time.monotonic()
                await eventually(lambda: c.leading, timeout_s=HUNG_AFTER_S)
                # At once: before b's lease could have expired (its last renewal, at most a
                # retry period before the release, plus the lease).
                assert time.monotonic() - released < LEASE_S - retry_period_s(LEASE_S)
    assert ("b", False) in seen and seen.count(("a", True)) == 1


async def test_a_release_that_meets_its_own_renewal_in_flight_still_gives_the_lease_up(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    # Seen under load: the release's write carried the record of the last renewal seen, a
    # renewal still in flight wrote after it, and the release failed 409, so the next
    # activator waited for the lease to expire instead of taking over at once.
    api = KubeApi(kube_api, NS, timeout_s=5)
    a = _election(api, "a", [])
    async with _running(a.run()):
        await eventually(lambda: a.leading, timeout_s=5)
    lease = await api.read_lease("lease")
    assert lease is not None and lease["spec"]["holderIdentity"] == "a"
    lease["spec"]["leaseDurationSeconds"] = 2  # a's renewal, landing late: a new version
    await api.replace_lease("lease", lease)
    await a.release()
    released = await api.read_lease("lease")
    assert released is not None and released["spec"].get("holderIdentity") in ("", None)


class _LateAnswers(KubeApi):
    """A KubeApi whose next Lease write, once `arm`ed, reaches the server at once but is
    answered only when `answer` is set: a renewal in flight when the activator releases."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.armed = False
        self.written = asyncio.Event()
        self.answer = asyncio.Event()

    async def replace_lease(self, name: str, lease: dict[str, Any]) -> dict[str, Any]:
        written = await super().replace_lease(name, lease)
        if self.armed:
            self.armed = False
            self.written.set()
            await self.answer.wait()
        return written


async def test_a_renewal_answered_after_the_release_does_not_make_a_leader_again(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    # Seen under load (tests/integration/kubernetes/test_kube_shared_up.py): a stopping
    # activator released the lease while its renewal was in flight; the renewal's answer made
    # it leader again, and as leader it freed bookings while it stopped.
    api = _LateAnswers(kube_api, NS, timeout_s=5)
    seen: list[tuple[str, bool]] = []
    a = _election(api, "a", seen)
    async with _running(a.run()):
        await eventually(lambda: a.leading, timeout_s=5)
        api.armed = True
        await asyncio.wait_for(api.written.wait(), 2 * LEASE_S)  # the next renewal is written
        await a.release()
        api.answer.set()  # ...and answered now
        await asyncio.sleep(0.2)
        assert not a.leading and seen == [("a", True), ("a", False)], seen
    released = await api.read_lease("lease")
    assert released is not None and released["spec"].get("holderIdentity") in ("", None)


async def test_the_pod_cache_relists_on_410_and_dropped_watches_and_misses_nothing(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    api = KubeApi(kube_api, NS, timeout_s=5)
    core = client.CoreV1Api(kube_api)
    informer = PodInformer(
        api, "app=x", what="test pods", watch_timeout_s=30,
        backoff=Backoff(0.01, 0.1), rng=random.Random(0),
    )  # fmt: skip
    sleeper = python_container("import time; time.sleep(60)")

    async def create(name: str) -> None:
        await core.create_namespaced_pod(NS, pod(name, sleeper, labels={"app": "x"}))

    async with _running(informer.run()):
        await informer.synced.wait()
        await create("one")
        await eventually(lambda: informer.get("one"), timeout_s=5)
        relists = informer.relists
        # The watch ends; while it is away a pod comes and the history is compacted, so it
        # resumes from a resourceVersion the server no longer has: 410 Gone, then a re-list.
        kube_apiserver.faults.delay("watch", "pods", 0.5, times=1)
        kube_apiserver.end_watches()
        await create("two")
        kube_apiserver.compact()
        await eventually(lambda: informer.get("two") and informer.relists > relists, timeout_s=5)
        kube_apiserver.faults.drop("watch", "pods", times=2)
        kube_apiserver.end_watches()
        await core.delete_namespaced_pod("one", NS, grace_period_seconds=0)
        await create("three")
        await eventually(lambda: informer.get("three") and informer.get("one") is None, timeout_s=5)
        kube_apiserver.faults.fail("list", "pods", code=500, times=2)
        kube_apiserver.compact()
        kube_apiserver.end_watches()
        await create("four")
        await eventually(lambda: informer.get("four"), timeout_s=5)
    assert sorted(p["metadata"]["name"] for p in informer.pods()) == ["four", "three", "two"]


async def test_followers_report_to_the_leader_which_sums_refuses_and_wakes() -> None:
    leading = {"a": True, "b": False}
    woken: list[str] = []
    async with aiohttp.ClientSession() as session:

        def reports(me: str, url: list[str]) -> PeerReports:
            return PeerReports(
                me, session, Metrics(), models=frozenset({"m"}), host="127.0.0.1", port=0,
                # Reports live HUNG_AFTER_S: none expires here (a 2 s one could, between
                # reports, on a loaded machine's stalled loop).
                interval_s=0.05, ttl_s=HUNG_AFTER_S, is_leader=lambda: leading[me],
                leader=lambda: "a", leader_url=lambda: url[0] if url else None,
            )  # fmt: skip

        leader_url: list[str] = []
        a, b = reports("a", []), reports("b", leader_url)
        await a.start()
        await b.start()
        leader_url.append(f"http://127.0.0.1:{a.port}")
        a.watch_demand("m", lambda: woken.append("m"))
        async with _running(a.run(), b.run()):
            assert a.exchange("m", mean=1.0, current=1) == PeerLoad()
            b.exchange("m", mean=2.0, current=4)  # held requests on b: reported at once
            await eventually(lambda: woken == ["m"])
            assert a.exchange("m", mean=1.0, current=1) == PeerLoad(2.0, 4)
            await eventually(lambda: b.exchange("m", mean=2.0, current=4) == PeerLoad(1.0, 1))
            bad = [b"[", b'{"activator": "x", "models": {"m": {"mean": NaN, "current": 1}}}']
            for body in bad:
                async with session.post(
                    f"{leader_url[0]}{REPORT_PATH}", data=body,
                    headers={"Content-Type": "application/json"},
                ) as resp:  # fmt: skip
                    assert resp.status == 400
                    assert "bad peer report" in (await resp.json())["error"]
            async with session.post(
                f"http://127.0.0.1:{b.port}{REPORT_PATH}", json={"activator": "a", "models": {}}
            ) as resp:
                assert resp.status == 409
                assert await resp.json() == {"error": "not the scaling leader", "leader": "a"}
        await a.close()
        await b.close()
