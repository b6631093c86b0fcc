"""Shared placement's pod budgets on the fake Kubernetes API server (issue 25): two activators
booking room on one pod from the same read never over-book it — the API server applies one
booking, the other gets 409 Conflict, reads again and places again (on another pod, or asks
for a new one); and, with real `thaw serve` pods under the test kubelet, the least recently
used idle model is evicted from a pod through the runtime's model control while a busy one
never is."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from activator.errors import ActivationFailed
from activator.observe.metrics import Metrics
from activator.scaler.backend import ModelActivity, ReplicaHandle
from activator.scaler.kube_config import DEFAULT_CLASS
from activator.scaler.kubernetes.api import KubeApi
from activator.scaler.kubernetes.backoff import Backoff
from activator.scaler.kubernetes.pod_budget import (
    ANNOTATION_SHARED_LOAD,
    ModelUse,
    PodLoad,
    load_of,
)
from activator.scaler.kubernetes.pod_informer import PodInformer
from activator.scaler.kubernetes.pod_starter import PodStarter
from activator.scaler.kubernetes.pod_state import LABEL_FLEET, LABEL_MODEL, is_ready
from activator.scaler.kubernetes.shared_pods import Booked, SharedPods
from activator.scaler.kubernetes.shared_replicas import SharedReplicas
from activator.scaler.placement import NewHost
from activator.scaler.runtime_control import RuntimeControl
from tests.fakes.kube_apiserver import FakeKubeApiServer
from tests.fakes.kube_fixtures import eventually
from tests.fakes.kube_manifests import pod, python_container
from tests.fakes.kubelet import LocalKubelet
from tests.fixtures.kube_fleet import NAMESPACE, POOL_SELECTOR, fast_config, pool_deployment
from tests.fixtures.models import make_add_sub
from tests.fixtures.up_process import make_broken

pytestmark = pytest.mark.integration

MiB = 1 << 20
SHARED = {"app": "shared"}
SELECTOR = "app=shared"


class _ReadTogether(KubeApi):
    """A KubeApi whose first pod list waits for the other activator's: both decide from the
    same read, the race the resourceVersion must settle (a fake with behaviour, not a mock)."""

    def __init__(self, api_client: Any, barrier: asyncio.Barrier) -> None:
        super().__init__(api_client, NAMESPACE, timeout_s=5)
        self._barrier: asyncio.Barrier | None = barrier

    async def list_pods(self, selector: str) -> tuple[list[dict[str, Any]], str]:
        answer = await super().list_pods(selector)
        if self._barrier is not None:
            barrier, self._barrier = self._barrier, None
            await barrier.wait()
        return answer


def _shared(api: KubeApi, clock: Callable[[], float] = lambda: 100.0) -> SharedPods:
    return SharedPods(
        api, SELECTOR, budget_bytes=10 * MiB, grace_s=2.0, release_grace_s=5.0,
        runtime_port=8000, clock=clock,
    )  # fmt: skip


async def _shared_pod(core: Any, name: str, load: PodLoad) -> None:
    manifest = pod(name, python_container("pass"), labels=SHARED)
    manifest["metadata"]["annotations"] = {ANNOTATION_SHARED_LOAD: load.to_text()}
    await core.create_namespaced_pod(NAMESPACE, manifest)


def _load(server: FakeKubeApiServer, name: str) -> PodLoad:
    found = load_of(server.get("pods", NAMESPACE, name) or {})
    assert found is not None
    return found


def _conflicts(server: FakeKubeApiServer) -> int:
    return sum(
        1 for r in server.requests if r.verb == "patch" and r.resource == "pods" and r.status == 409
    )


async def _race(server: FakeKubeApiServer, need: Mapping[str, int]) -> list[Booked | NewHost]:
    """Two activators, each with its own API client, place one model each from one read."""
    barrier = asyncio.Barrier(2)
    async with (
        client.ApiClient(server.client_configuration()) as one,
        client.ApiClient(server.client_configuration()) as two,
    ):
        placers = [_shared(_ReadTogether(c, barrier)) for c in (one, two)]
        return list(
            await asyncio.gather(
                *(p.place(m, n, {}) for p, (m, n) in zip(placers, need.items(), strict=True))
            )
        )


async def test_two_activators_booking_one_pod_from_one_read_never_over_book_it(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    core = client.CoreV1Api(kube_api)
    # Both pods fit either model, not both: best fit picks the fuller one, `p1`, for both.
    await _shared_pod(core, "p1", PodLoad(10 * MiB, {"resident": 2 * MiB}))
    await _shared_pod(core, "p2", PodLoad(10 * MiB))
    placed = await _race(kube_apiserver, {"m1": 6 * MiB, "m2": 6 * MiB})

    assert all(isinstance(p, Booked) for p in placed), placed
    booked = {p.model: p for p in placed if isinstance(p, Booked)}
    assert {b.pod for b in booked.values()} == {"p1", "p2"}  # the loser placed again, elsewhere
    assert sorted(b.conflicts for b in booked.values()) == [0, 1]
    assert _conflicts(kube_apiserver) == 1  # the API server refused exactly one booking
    for name in ("p1", "p2"):
        load = _load(kube_apiserver, name)
        assert load.used_bytes <= load.budget_bytes, (name, load)
    loser = next(b for b in booked.values() if b.conflicts)
    assert _load(kube_apiserver, "p2").models == {loser.model: 6 * MiB}


async def test_the_loser_with_no_room_left_anywhere_asks_for_a_new_pod(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    core = client.CoreV1Api(kube_api)
    await _shared_pod(core, "only", PodLoad(10 * MiB, {"busy": 3 * MiB}))
    placed = await _race(kube_apiserver, {"m1": 5 * MiB, "m2": 5 * MiB})
    assert sorted(type(p).__name__ for p in placed) == ["Booked", "NewHost"]
    assert _load(kube_apiserver, "only").used_bytes == 8 * MiB  # busy + the winner only
    assert _conflicts(kube_apiserver) == 1


async def test_a_model_is_placed_only_on_shared_pods_of_its_own_placement_class(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    core = client.CoreV1Api(kube_api)
    # The default-class pod has the most room; the GPU model still goes to the GPU pod.
    await _shared_pod(core, "cpu", PodLoad(10 * MiB))
    await _shared_pod(core, "gpu", PodLoad(10 * MiB, {"llm": 4 * MiB}, placement_class="gpu"))
    shared = _shared(KubeApi(kube_api, NAMESPACE, timeout_s=5))
    on_gpu = await shared.place("coder", 5 * MiB, {}, placement_class="gpu")
    assert isinstance(on_gpu, Booked) and on_gpu.pod == "gpu"
    assert _load(kube_apiserver, "gpu").models == {"llm": 4 * MiB, "coder": 5 * MiB}
    assert _load(kube_apiserver, "gpu").placement_class == "gpu"  # the booking keeps it
    on_cpu = await shared.place("tok", 5 * MiB, {})  # the default class
    assert isinstance(on_cpu, Booked) and on_cpu.pod == "cpu"
    # No shared pod of a class yet (or none with room in it): a new pod of that class.
    assert isinstance(await shared.place("asr", MiB, {}, placement_class="tpu"), NewHost)
    assert isinstance(await shared.place("big", 2 * MiB, {}, placement_class="gpu"), NewHost)


async def test_unbooking_frees_room_and_an_empty_pod_is_released_after_its_grace(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    core = client.CoreV1Api(kube_api)
    await _shared_pod(core, "p", PodLoad(10 * MiB, {"a": 4 * MiB}))
    now = [100.0]
    shared = _shared(KubeApi(kube_api, NAMESPACE, timeout_s=5), clock=lambda: now[0])
    assert await shared.releasable() == []
    assert await shared.unbook("p", "a") is True
    assert await shared.unbook("p", "a") is False  # gone already: nothing written
    assert _load(kube_apiserver, "p").models == {}
    assert await shared.releasable() == []  # empty from now on
    now[0] += 4.9
    assert await shared.releasable() == []
    now[0] += 0.2
    assert await shared.releasable() == ["p"]
    # A booking makes it busy again: not released.
    placed = await shared.place("b", MiB, {})
    assert isinstance(placed, Booked) and placed.pod == "p"
    now[0] += 60
    assert await shared.releasable() == []


async def test_a_pod_with_a_malformed_booking_is_left_alone(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    core = client.CoreV1Api(kube_api)
    manifest = pod("bad", python_container("pass"), labels=SHARED)
    manifest["metadata"]["annotations"] = {ANNOTATION_SHARED_LOAD: '{"budget_bytes": "lots"}'}
    await core.create_namespaced_pod(NAMESPACE, manifest)
    shared = _shared(KubeApi(kube_api, NAMESPACE, timeout_s=5))
    decision = await shared.place("m", MiB, {})
    assert isinstance(decision, NewHost)
    assert not [r for r in kube_apiserver.requests if r.verb == "patch"]


# ---- with real runtimes: eviction through the model control API ---------------------------


@pytest.fixture
async def runtime_pods(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubelet_factory: Callable[..., LocalKubelet],
    tmp_path: Path,
) -> list[dict[str, Any]]:
    """Two ready `thaw serve` pool pods (explicit model control) serving add_sub copies."""
    repo = tmp_path / "repo"
    for name in ("m_a", "m_b", "m_c"):
        make_add_sub(repo, name)
    make_broken(repo)  # its initialize() fails: a load that fails
    kubelet_factory(host_paths={"/models": repo, "/cache": tmp_path / "cache"})
    await client.AppsV1Api(kube_api).create_namespaced_deployment(NAMESPACE, pool_deployment(2))

    def ready() -> list[dict[str, Any]]:
        pods = kube_apiserver.objects("pods", NAMESPACE)
        return [p for p in pods if is_ready(p)]

    await eventually(lambda: len(ready()) == 2, timeout_s=90)
    return sorted(ready(), key=lambda p: p["metadata"]["name"])


async def test_an_idle_model_is_evicted_through_the_runtime_and_a_busy_one_never_is(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    runtime_pods: list[dict[str, Any]],
) -> None:
    clock = count(100.0, 10.0)  # each read ten seconds on: past the 2 s eviction grace
    pool = ",".join(f"{k}={v}" for k, v in POOL_SELECTOR.items())
    shared = SharedPods(
        KubeApi(kube_api, NAMESPACE, timeout_s=5), pool, budget_bytes=10 * MiB, grace_s=2.0,
        release_grace_s=5.0, runtime_port=8000, clock=lambda: next(clock),
    )  # fmt: skip
    first, second = runtime_pods
    async with aiohttp.ClientSession() as session:
        # The leader found no shared pod (NewHost) and claimed `first`: its first booking.
        assert isinstance(await shared.place("m_a", 6 * MiB, {}), NewHost)
        opened = await shared.open(first, "m_a", 6 * MiB)
        assert opened.url is not None
        control = RuntimeControl(session, opened.url, name=opened.pod)
        await control.load("m_a", timeout_s=60)

        # m_a busy (a request in flight): m_b must not take its room.
        busy = {"m_a": ModelUse(in_flight=1, last_used_at=0.0)}
        assert isinstance(await shared.place("m_b", 6 * MiB, busy), NewHost)
        assert await control.model_ready("m_a")

        # m_a idle past the grace: evicted, unloaded through the runtime, m_b loads there.
        idle = {"m_a": ModelUse(last_used_at=0.0)}
        booked = await shared.place("m_b", 6 * MiB, idle)
        assert isinstance(booked, Booked)
        assert (booked.pod, booked.evict) == (opened.pod, ("m_a",))
        await shared.evict(booked, session, timeout_s=30)
        await control.load("m_b", timeout_s=60)
        assert not await control.model_ready("m_a") and await control.model_ready("m_b")
        assert _load(kube_apiserver, opened.pod).models == {"m_b": 6 * MiB}
        # The other pod was never touched.
        untouched = kube_apiserver.get("pods", NAMESPACE, second["metadata"]["name"])
        assert load_of(untouched or {}) is None


# ---- the leader's shared replicas: claim, share, evict, stop, release ----------------------


@dataclass
class _Model:
    """A shared model's endpoint, as SharedReplicas sees it: its activity and its scale to
    zero (which stops its replicas through the scaler, as ModelEndpoint.scale_to_zero does)."""

    activity: ModelActivity = field(default_factory=ModelActivity)
    replicas: list[str] = field(default_factory=list)
    stop: Callable[[str], Awaitable[None]] | None = None
    evicted: int = 0

    async def scale_to_zero(self) -> None:
        self.evicted += 1
        assert self.stop is not None
        for replica in self.replicas:
            await self.stop(replica)
        self.replicas.clear()


@contextlib.asynccontextmanager
async def _leader(
    kube_api: client.ApiClient, session: aiohttp.ClientSession, clock: Callable[[], float]
) -> AsyncIterator[SharedReplicas]:
    """The pieces of a scaling leader that shared replicas need: the pool's and the model
    pods' watch caches, the pool's pod starter, and the shared pods' bookings; all on `clock`."""
    config = fast_config(models=("m_a", "m_b", "m_c"), leader_election=False)
    api = KubeApi(kube_api, NAMESPACE, timeout_s=5)
    rng, backoff = random.Random(7), Backoff(0.05, 0.5)
    pool_class = config.classes()[DEFAULT_CLASS]
    pool = PodInformer(api, pool_class.selector_text, what="pool", watch_timeout_s=30,
                       backoff=backoff, rng=rng)  # fmt: skip
    fleet = f"{LABEL_FLEET}={config.fleet},{LABEL_MODEL}"
    pods = PodInformer(api, fleet, what="model pods", watch_timeout_s=30, backoff=backoff,
                       rng=rng)  # fmt: skip
    tasks = [asyncio.ensure_future(i.run()) for i in (pool, pods)]
    starter = PodStarter(config, api, session, Metrics(), pool=pool, pods=pods,
                         pool_class=pool_class, backoff=backoff, rng=rng,
                         clock=clock)  # fmt: skip
    try:
        await asyncio.gather(pool.synced.wait(), pods.synced.wait())
        await starter.fetch_pool()
        shared = SharedPods(api, fleet, budget_bytes=9 * MiB, grace_s=2.0,
                            release_grace_s=5.0, runtime_port=8000, clock=clock)  # fmt: skip
        yield SharedReplicas(
            shared, {DEFAULT_CLASS: starter}, session, overhead_bytes=0, clock=clock
        )
    finally:
        starter.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_the_leader_shares_a_pod_evicts_the_idle_model_and_releases_the_empty_pod(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    runtime_pods: list[dict[str, Any]],
) -> None:
    # The monotonic clock, stepped forward by the test past the eviction and release graces
    # (steps only between calls: every deadline is taken after a step).
    skew = [0.0]

    def clock() -> float:
        return time.monotonic() + skew[0]

    models = {name: _Model() for name in ("m_a", "m_b", "m_c", "broken")}
    async with aiohttp.ClientSession() as session, _leader(kube_api, session, clock) as leader:
        for name, model in models.items():
            model.stop = functools.partial(leader.stop, timeout_s=30)
            leader.share(name, image_bytes=4 * MiB,
                         activity=lambda m=model: m.activity,  # type: ignore[misc]
                         evict=model.scale_to_zero)  # fmt: skip

        async def start(name: str) -> ReplicaHandle:
            handle = await leader.start(name, timeout_s=60)
            models[name].replicas.append(handle.id)
            return handle

        a = await start("m_a")  # no shared pod yet: a pool pod claimed and booked
        # A load that fails on the shared pod gives its room back.
        with pytest.raises(ActivationFailed, match="broken"):
            await start("broken")
        assert _load(kube_apiserver, str(a.host)).models == {"m_a": 4 * MiB}
        b = await start("m_b")  # room beside it: the same pod
        assert a.host == b.host and a.url == b.url and a.id != b.id
        pod = str(a.host)
        assert _load(kube_apiserver, pod).models == {"m_a": 4 * MiB, "m_b": 4 * MiB}
        control = RuntimeControl(session, a.url, name=pod)
        assert await control.model_ready("m_a") and await control.model_ready("m_b")

        # m_a busy, m_b idle past the grace: m_c takes m_b's room, through m_b's own scale
        # to zero (its replica stopped: unloaded, unbooked).
        models["m_a"].activity = ModelActivity(in_flight=1, last_request_at=clock())
        models["m_b"].activity = ModelActivity(last_request_at=clock())
        skew[0] += 10
        c = await start("m_c")
        assert c.host == pod and models["m_b"].evicted == 1 and models["m_a"].evicted == 0
        assert leader.evictions == {"m_b": 1}
        assert _load(kube_apiserver, pod).models == {"m_a": 4 * MiB, "m_c": 4 * MiB}
        assert not await control.model_ready("m_b") and await control.model_ready("m_c")

        # Both stop: the pod stays, booked empty, until the release grace has passed.
        await leader.stop(a.id, timeout_s=30)
        await leader.stop(c.id, timeout_s=30)
        assert _load(kube_apiserver, pod).models == {}
        assert not await control.model_ready("m_a")
        assert await leader.release(grace_s=1) == []  # seen empty from now on
        skew[0] += 6
        assert await leader.release(grace_s=1) == [pod]
        await eventually(lambda: kube_apiserver.get("pods", NAMESPACE, pod) is None, timeout_s=30)
