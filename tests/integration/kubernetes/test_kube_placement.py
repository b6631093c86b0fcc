"""Per-model placement on the fake Kubernetes (issue 22, item 5): a warm pool per placement
class (`--pool-class gpu=gpu-pool` beside the default pool); a model claims only pods of its
class's pool — a CPU model never takes a GPU pod — and with its pool empty it makes a model
pod from its own class's template; claims and misses are counted by class."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from activator.errors import ScalerUnavailable
from activator.observe.metrics import Metrics
from activator.scaler.backend import ModelActivity
from activator.scaler.kubernetes.backend import KubernetesBackend
from activator.scaler.kubernetes.pod_budget import load_of
from activator.scaler.kubernetes.pod_state import LABEL_MODEL, is_ready
from tests.fakes.kube_apiserver import FakeKubeApiServer
from tests.fakes.kube_fixtures import eventually
from tests.fakes.kubelet import LocalKubelet
from tests.fixtures.kube_fleet import NAMESPACE, POOL, POOL_SELECTOR, fast_config, pool_deployment
from tests.fixtures.models import make_add_sub

pytestmark = pytest.mark.integration

GPU_POOL = "gpu-pool"
GPU_SELECTOR = {"thaw.dev/pool": GPU_POOL}
CPU_MODEL, GPU_MODEL = "cpu_model", "gpu_model"


def _pods(server: FakeKubeApiServer, labels: dict[str, str]) -> list[dict[str, Any]]:
    return [
        p
        for p in server.objects("pods", NAMESPACE)
        if all((p["metadata"].get("labels") or {}).get(k) == v for k, v in labels.items())
    ]


def _owner(pod: dict[str, Any]) -> str:
    (ref,) = pod["metadata"]["ownerReferences"]
    return str(ref["name"])


async def _serving(server: FakeKubeApiServer) -> dict[str, dict[str, Any]]:
    """Every model pod, once each is marked serving (the mark follows the start's return)."""

    def marked() -> bool:
        pods = [p for p in server.objects("pods", NAMESPACE) if _is_model_pod(p)]
        return all(p["metadata"]["annotations"]["thaw.dev/state"] == "serving" for p in pods)

    await eventually(marked, timeout_s=10)
    return {p["metadata"]["name"]: p for p in server.objects("pods", NAMESPACE)}


def _is_model_pod(pod: dict[str, Any]) -> bool:
    return LABEL_MODEL in (pod["metadata"].get("labels") or {})


def _sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
async def pools(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubelet_factory: Callable[..., LocalKubelet],
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    make_add_sub(repo, CPU_MODEL)
    make_add_sub(repo, GPU_MODEL)
    kubelet_factory(host_paths={"/models": repo, "/cache": tmp_path / "cache"})
    apps = client.AppsV1Api(kube_api)
    await apps.create_namespaced_deployment(NAMESPACE, pool_deployment(1))
    gpu = pool_deployment(1, name=GPU_POOL, selector=GPU_SELECTOR)
    await apps.create_namespaced_deployment(NAMESPACE, gpu)

    def ready(selector: dict[str, str]) -> int:
        return sum(is_ready(p) for p in _pods(kube_apiserver, selector))

    await eventually(lambda: ready(POOL_SELECTOR) == ready(GPU_SELECTOR) == 1, timeout_s=60)


@pytest.fixture
async def backend(
    pools: None, kube_api: client.ApiClient
) -> AsyncIterator[tuple[KubernetesBackend, Metrics]]:
    metrics = Metrics()
    config = fast_config(
        models=(CPU_MODEL, GPU_MODEL), leader_election=False,
        pool_classes=(("gpu", GPU_POOL),), model_classes=((GPU_MODEL, "gpu"),),
    )  # fmt: skip
    async with aiohttp.ClientSession() as session:
        scaler = KubernetesBackend(
            config, session, metrics, drain_timeout_s=1.0, api_client=kube_api
        )
        await scaler.start()
        try:
            yield scaler, metrics
        finally:
            await scaler.close()


async def test_each_model_claims_only_its_classes_pool_and_misses_into_its_own_template(
    kube_apiserver: FakeKubeApiServer, backend: tuple[KubernetesBackend, Metrics]
) -> None:
    scaler, metrics = backend
    gpu_pod = (await scaler.start_replica(GPU_MODEL, timeout_s=60)).id
    cpu_pod = (await scaler.start_replica(CPU_MODEL, timeout_s=60)).id
    pods = await _serving(kube_apiserver)
    assert _owner(pods[gpu_pod]) == GPU_POOL and _owner(pods[cpu_pod]) == POOL
    for model, cls in ((GPU_MODEL, "gpu"), (CPU_MODEL, "default")):
        claimed = _sample(
            metrics, "thaw_kube_pod_claims_total", model=model, placement_class=cls,
            result="claimed",
        )  # fmt: skip
        assert claimed == 1, (model, cls)
    # The GPU pool's replacement is not ready yet; the default pool's is, or soon will be.
    # A second GPU replica must not take a default pod: it claims its own pool's
    # replacement or makes a model pod from the GPU pool's template.
    await eventually(lambda: any(is_ready(p) for p in _pods(kube_apiserver, POOL_SELECTOR)))
    second = (await scaler.start_replica(GPU_MODEL, timeout_s=60)).id
    pods = await _serving(kube_apiserver)
    assert _owner(pods[second]) == GPU_POOL
    gpu_model_pods = _pods(kube_apiserver, {LABEL_MODEL: GPU_MODEL})
    assert len(gpu_model_pods) == 2 and all(_owner(p) == GPU_POOL for p in gpu_model_pods)
    assert not _sample(metrics, "thaw_kube_pod_claims_total", model=GPU_MODEL,
                       placement_class="default", result="claimed")  # fmt: skip


async def test_a_class_pool_that_does_not_select_thaw_dev_pool_is_refused_at_start(
    pools: None, kube_api: client.ApiClient
) -> None:
    config = fast_config(models=(GPU_MODEL,), leader_election=False,
                         pool_classes=(("gpu", "no-such-pool"),))  # fmt: skip
    async with aiohttp.ClientSession() as session:
        scaler = KubernetesBackend(
            config, session, Metrics(), drain_timeout_s=1.0, api_client=kube_api
        )
        with pytest.raises(ScalerUnavailable, match=r"no-such-pool.*placement class 'gpu'"):
            await scaler.start()


async def test_a_shared_model_shares_only_pods_of_its_own_class(
    kube_apiserver: FakeKubeApiServer, backend: tuple[KubernetesBackend, Metrics]
) -> None:
    # Both models shared: the GPU model's room is on a pod of the GPU pool, and the CPU
    # model, with room left on that pod, still gets a pod of its own (default) class.
    scaler, _metrics = backend

    async def no_eviction() -> None:
        raise AssertionError("nothing is evicted here")

    for model in (GPU_MODEL, CPU_MODEL):
        scaler.share(model, image_bytes=1 << 20, activity=ModelActivity, evict=no_eviction)
    gpu = await scaler.start_replica(GPU_MODEL, timeout_s=60)
    cpu = await scaler.start_replica(CPU_MODEL, timeout_s=60)
    gpu_pod, cpu_pod = gpu.id.split("/")[0], cpu.id.split("/")[0]
    assert gpu_pod != cpu_pod
    pods = await _serving(kube_apiserver)
    assert _owner(pods[gpu_pod]) == GPU_POOL and _owner(pods[cpu_pod]) == POOL
    gpu_load = load_of(pods[gpu_pod])
    assert gpu_load is not None and gpu_load.placement_class == "gpu"
    assert set(gpu_load.models) == {GPU_MODEL}
    cpu_load = load_of(pods[cpu_pod])
    assert cpu_load is not None and cpu_load.placement_class == "default"
