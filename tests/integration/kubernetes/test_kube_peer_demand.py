"""How fast the scaling leader learns of a follower's demand (issue 21, defect 4): a report of
a request held on a follower wakes the leader's reconciler at once — also when the endpoint
asked to be woken before the backend started (as `thaw up` does) — and a follower tells the
leader at once when its demand goes, not a period later; and the model it woke for that
request stays up through its idle grace (defect 3).

Reports are sent with a period of a minute here, so only the urgent ones can pass the test.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
from kubernetes_asyncio import client

from activator.config import ScaleSettings
from activator.endpoint.model_endpoint import ModelEndpoint
from activator.observe.metrics import Metrics
from activator.scaler.backend import PeerLoad
from activator.scaler.kubernetes.backend import KubernetesBackend
from activator.scaler.kubernetes.peer_reports import PeerReports
from tests.fakes.clock import FakeClock
from tests.fakes.kube_fixtures import eventually
from tests.fakes.kubelet import LocalKubelet
from tests.fixtures.kube_fleet import NAMESPACE, fast_config, pool_deployment
from tests.fixtures.models import make_add_sub

pytestmark = pytest.mark.integration

MODEL = "m"


@pytest.fixture
async def leader(kube_api: client.ApiClient) -> AsyncIterator[tuple[KubernetesBackend, list[str]]]:
    await client.AppsV1Api(kube_api).create_namespaced_deployment(NAMESPACE, pool_deployment(0))
    woken: list[str] = []
    async with aiohttp.ClientSession() as session:
        backend = KubernetesBackend(
            fast_config(models=(MODEL,), activator_id="leader", report_interval_s=60),
            session, Metrics(), drain_timeout_s=1.0, api_client=kube_api,
        )  # fmt: skip
        backend.watch_demand(MODEL, lambda: woken.append(MODEL))  # before start, as thaw up
        await backend.start()
        try:
            await eventually(lambda: backend.leading, timeout_s=5)
            yield backend, woken
        finally:
            await backend.close()


async def test_a_followers_demand_wakes_the_leader_at_once_and_its_end_is_told_at_once(
    leader: tuple[KubernetesBackend, list[str]],
) -> None:
    backend, woken = leader
    assert backend._reports is not None
    url = f"http://127.0.0.1:{backend._reports.port}"
    async with aiohttp.ClientSession() as session:
        follower = PeerReports(
            "follower", session, Metrics(), models=frozenset({MODEL}), host="127.0.0.1",
            port=0, interval_s=60, ttl_s=120, is_leader=lambda: False,
            leader=lambda: "leader", leader_url=lambda: url,
        )  # fmt: skip
        sender = asyncio.ensure_future(follower.run())
        try:
            follower.exchange(MODEL, mean=0.0, current=1)  # a request held on the follower
            # Before the fix: never (the wake registered before start() was dropped); the
            # leader only saw the demand at its next tick.
            await eventually(lambda: woken == [MODEL], timeout_s=5)
            assert backend.exchange(MODEL, mean=0.0, current=0) == PeerLoad(0.0, 1)
            follower.exchange(MODEL, mean=1.0, current=0)  # served: the demand went
            # Before the fix: told only a period (here a minute) later.
            await eventually(
                lambda: backend.exchange(MODEL, mean=0.0, current=0).current == 0, timeout_s=5
            )
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)


async def test_a_model_woken_for_a_followers_request_stays_up_through_its_grace(
    kube_api: client.ApiClient,
    kubelet_factory: Callable[..., LocalKubelet],
    tmp_path: Path,
) -> None:
    # Issue 21, defect 3, on the fake Kubernetes: a request held only on a follower wakes the
    # leader's model (a real pool pod claimed and loaded); the follower's request is served
    # and it says so. The leader's next decision must keep the model for its idle grace, not
    # scale it to zero as "never used". The leader's time is a stepped clock.
    repo = tmp_path / "repo"
    make_add_sub(repo, "add_sub")
    kubelet_factory(host_paths={"/models": repo, "/cache": tmp_path / "cache"})
    await client.AppsV1Api(kube_api).create_namespaced_deployment(NAMESPACE, pool_deployment(1))
    settings = ScaleSettings(scale_to_zero_grace_s=30)
    clock = FakeClock()
    async with aiohttp.ClientSession() as session:
        backend = KubernetesBackend(
            fast_config(models=("add_sub",), activator_id="leader", report_interval_s=60),
            session, Metrics(), drain_timeout_s=1.0, api_client=kube_api, clock=clock,
        )  # fmt: skip
        endpoint = ModelEndpoint("add_sub", settings, backend, Metrics(), clock=clock)
        await backend.start()
        assert backend._reports is not None
        url = f"http://127.0.0.1:{backend._reports.port}"
        follower = PeerReports(
            "follower", session, Metrics(), models=frozenset({"add_sub"}), host="127.0.0.1",
            port=0, interval_s=60, ttl_s=120, is_leader=lambda: False,
            leader=lambda: "leader", leader_url=lambda: url,
        )  # fmt: skip
        sender = asyncio.ensure_future(follower.run())
        try:
            await eventually(lambda: backend.leading, timeout_s=5)
            follower.exchange("add_sub", mean=0.0, current=1)  # held on the follower
            await eventually(lambda: endpoint.ready_count == 1, timeout_s=60)
            follower.exchange("add_sub", mean=0.0, current=0)  # served there
            await eventually(
                lambda: backend.exchange("add_sub", mean=0.0, current=0).current == 0,
                timeout_s=5,
            )
            clock.advance(0.5)
            # Before the fix: 0 ("never used"), the pod drained 0.5 s after it was woken.
            assert endpoint.tick().desired == 1
            clock.advance(settings.scale_to_zero_grace_s)
            assert endpoint.tick().desired == 0  # the grace, from the peer's demand, is over
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
            await endpoint.close()
            await backend.close()
