"""A Python model's model loading API through `thaw up --scaler kubernetes` on the fake API
server and the test kubelet: `pb_utils.load_model` in a model's pod loads the model for the
fleet (the front door the chart gives every runtime pod, the activators' Service), which
serves it to clients in a pod of its own; `unload_model` refuses it to clients;
`is_model_ready` is the fleet's answer; a load override is refused in the words a client's
gets on Kubernetes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from tests.fakes.kube_apiserver import FakeKubeApiServer
from tests.fakes.kube_fixtures import eventually
from tests.fakes.kubelet import LocalKubelet
from tests.fixtures.kube_fleet import (
    NAMESPACE,
    POOL,
    model_pods,
    pool_deployment,
    ready_pool_pods,
    up_args,
)
from tests.fixtures.model_loader import loader_answer, loader_request, make_model_loader
from tests.fixtures.models import make_add_sub
from tests.fixtures.up_process import UpProcess, with_params

pytestmark = pytest.mark.integration


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    for model in (make_model_loader(repo), make_add_sub(repo, "add_sub")):
        with_params(model, scale_to_zero_grace_s=60, activation_timeout_s=90)
    return repo


@pytest.fixture
def fleet(kubelet_factory: Callable[..., LocalKubelet], repo: Path, tmp_path: Path) -> LocalKubelet:
    return kubelet_factory(host_paths={"/models": repo, "/cache": tmp_path / "cache"})


def _pods_of(server: FakeKubeApiServer, model: str) -> list[str]:
    return [p["metadata"]["name"] for p in model_pods(server, model)]


async def _ask(session: aiohttp.ClientSession, url: str, **call: Any) -> dict[str, Any]:
    async with session.post(f"{url}/v2/models/loader/infer", json=loader_request(**call)) as resp:
        body = await resp.json()
        assert resp.status == 200, body
    return loader_answer(body)


async def _status(session: aiohttp.ClientSession, method: str, url: str, **kw: Any) -> int:
    async with session.request(method, url, **kw) as resp:
        await resp.read()
        return resp.status


async def test_a_model_loaded_by_a_model_in_its_pod_is_the_fleets(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubeconfig_path: Path,
    fleet: LocalKubelet,
    repo: Path,
) -> None:
    apps = client.AppsV1Api(kube_api)
    await apps.create_namespaced_deployment(NAMESPACE, pool_deployment(0))
    args = up_args(
        kubeconfig_path,
        activator_id="activator-0",
        loaded_at_start=False,
        extra=("--load-model-at-zero", "loader"),
    )
    up = await asyncio.to_thread(UpProcess, repo, *args)
    try:
        # The pool's pods know the front door as the chart tells them the activators' Service.
        manifest = pool_deployment(2, extra_args=["--front-door", up.url])
        current = await apps.read_namespaced_deployment(POOL, NAMESPACE)
        manifest["metadata"]["resourceVersion"] = current.metadata.resource_version
        await apps.replace_namespaced_deployment(POOL, NAMESPACE, manifest)
        await eventually(lambda: len(ready_pool_pods(kube_apiserver)) == 2, timeout_s=90)
        add_sub = f"{up.url}/v2/models/add_sub"
        body = {
            "inputs": [
                {"name": n, "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}
                for n in ("INPUT0", "INPUT1")
            ]
        }
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=180)) as session:
                assert await _ask(session, up.url, op="ready", name="add_sub") == {"ready": False}
                assert await _status(session, "GET", f"{add_sub}/ready") != 200

                assert await _ask(session, up.url, op="load", name="add_sub") == {"ready": True}
                assert await _status(session, "GET", f"{add_sub}/ready") == 200
                assert await _status(session, "POST", f"{add_sub}/infer", json=body) == 200
                (loader_pod,) = _pods_of(kube_apiserver, "loader")
                (adder_pod,) = _pods_of(kube_apiserver, "add_sub")
                assert loader_pod != adder_pod  # a pod of its own, not inside the loader's

                refused = await _ask(
                    session, up.url, op="load", name="add_sub", config='{"max_batch_size": 0}'
                )
                assert "not supported with --scaler kubernetes" in refused["error"]

                assert await _ask(session, up.url, op="unload", name="add_sub") == {"ready": False}
                assert await _status(session, "GET", f"{add_sub}/ready") != 200
                assert await _status(session, "POST", f"{add_sub}/infer", json=body) != 200
        except AssertionError as exc:  # keep the pods' logs
            logs = "\n".join(
                f"--- pod {name}\n{fleet.logs(NAMESPACE, name)[-6000:]}"
                for model in ("loader", "add_sub")
                for name in _pods_of(kube_apiserver, model)
            )
            raise AssertionError(f"{exc}\n{logs}\n--- thaw up\n{up.log()[-6000:]}") from exc
    finally:
        up.stop()
    assert "Traceback" not in up.log(), up.log()
