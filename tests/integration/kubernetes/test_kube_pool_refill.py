"""The warm pool refills after the cold start, not during it (issue 21, defect 4): a claimed
pool pod keeps the pool's labels while its model loads, so the pool's ReplicaSet starts no
replacement beside the restore (it would take the CPU, disk and page cache the cold start
needs: the local pool defers its refill likewise); the `serving` mark takes it out of the
pool, and the replacement starts then. A second start meanwhile never claims the loading pod.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from activator.observe.metrics import Metrics
from activator.scaler.kubernetes.backend import KubernetesBackend
from activator.scaler.kubernetes.pod_state import ANNOTATION_STATE, is_ready
from tests.fakes.kube_apiserver import FakeKubeApiServer
from tests.fakes.kube_fixtures import eventually
from tests.fakes.kubelet import LocalKubelet
from tests.fixtures.kube_fleet import NAMESPACE, POOL, POOL_SELECTOR, fast_config, pool_deployment
from tests.fixtures.models import make_slow_init

pytestmark = pytest.mark.integration

MODEL = "slow_init"


def _pool_pods(server: FakeKubeApiServer) -> list[dict[str, Any]]:
    return [
        p
        for p in server.objects("pods", NAMESPACE)
        if all((p["metadata"].get("labels") or {}).get(k) == v for k, v in POOL_SELECTOR.items())
    ]


async def test_the_pool_replaces_a_claimed_pod_once_it_serves_not_while_it_loads(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubelet_factory: Callable[..., LocalKubelet],
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    make_slow_init(repo, MODEL, delay_s=2.0)
    kubelet_factory(host_paths={"/models": repo, "/cache": tmp_path / "cache"})
    await client.AppsV1Api(kube_api).create_namespaced_deployment(NAMESPACE, pool_deployment(1))
    await eventually(
        lambda: sum(is_ready(p) for p in _pool_pods(kube_apiserver)) == 1, timeout_s=60
    )
    (pooled,) = _pool_pods(kube_apiserver)
    name = pooled["metadata"]["name"]
    async with aiohttp.ClientSession() as session:
        backend = KubernetesBackend(
            fast_config(models=(MODEL,), leader_election=False),
            session, Metrics(), drain_timeout_s=1.0, api_client=kube_api,
        )  # fmt: skip
        await backend.start()
        try:
            start = asyncio.ensure_future(backend.start_replica(MODEL, timeout_s=60))

            def state() -> str | None:
                pod = kube_apiserver.get("pods", NAMESPACE, name) or {}
                return (pod.get("metadata", {}).get("annotations") or {}).get(ANNOTATION_STATE)

            await eventually(lambda: state() == "loading", timeout_s=10)
            # the backend sees its claim through its informer's watch, a moment after the API
            # server has it (a loaded machine: longer); from then on it stays claimed
            await eventually(lambda: backend.pool_status().ready == 0, timeout_s=10)
            while state() == "loading":  # the whole load (initialize sleeps 2 s)
                # Before the fix: the claim took the pod out of the pool at once, and the
                # ReplicaSet's replacement started beside the restore.
                assert [p["metadata"]["name"] for p in _pool_pods(kube_apiserver)] == [name]
                assert backend.pool_status().ready == 0  # claimed: not ready for another
                await asyncio.sleep(0.05)
            handle = await asyncio.wait_for(start, 30)
            assert handle.id == name

            def owners() -> list[str]:
                pod = kube_apiserver.get("pods", NAMESPACE, name) or {"metadata": {}}
                return [r["name"] for r in pod["metadata"].get("ownerReferences") or []]

            # The serving mark (written beside the first request) makes the pool Deployment
            # its owner and takes it out of the pool.
            await eventually(lambda: owners() == [POOL] and state() == "serving", timeout_s=10)
            await eventually(  # now the pool refills
                lambda: [p for p in _pool_pods(kube_apiserver) if p["metadata"]["name"] != name],
                timeout_s=10,
            )
        finally:
            await backend.close()
