"""Models that call other models, through `thaw up --scaler kubernetes` on the fake API server
and the test kubelet: a Python model's BLS call and an ensemble's steps leave their pod for the
activators' front door (`--front-door`, `--ensemble-steps-url`, as the Helm chart gives every
runtime pod), which wakes the called model from zero in a pod of its own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
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
from tests.fixtures.models import make_add_sub, make_ensemble
from tests.fixtures.up_process import UpProcess, with_params

pytestmark = pytest.mark.integration

# BLS: OUTPUT0 = add_sub(INPUT0, INPUT0).OUTPUT0, computed by the add_sub model wherever it runs.
_CALLER_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            answer = pb_utils.InferenceRequest(
                model_name="add_sub",
                requested_output_names=["OUTPUT0"],
                inputs=[pb_utils.Tensor("INPUT0", x), pb_utils.Tensor("INPUT1", x)],
            ).exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            out = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses
"""
_CALLER = """
name: "caller"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
_PIPELINE = """
name: "pipeline"
platform: "ensemble"
input [
  { name: "A" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "B" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [ { name: "DIFF" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "add_sub" model_version: -1
    input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
    output_map { key: "OUTPUT1" value: "DIFF" } }
] }
"""


def _caller(repo: Path) -> Path:
    (repo / "caller" / "1").mkdir(parents=True)
    (repo / "caller" / "config.pbtxt").write_text(_CALLER)
    (repo / "caller" / "1" / "model.py").write_text(_CALLER_PY)
    return repo / "caller"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    for model in (
        make_add_sub(repo, "add_sub"),
        _caller(repo),
        make_ensemble(repo, "pipeline", _PIPELINE),
    ):
        with_params(model, scale_to_zero_grace_s=60, activation_timeout_s=90)
    return repo


@pytest.fixture
def fleet(kubelet_factory: Callable[..., LocalKubelet], repo: Path, tmp_path: Path) -> LocalKubelet:
    return kubelet_factory(host_paths={"/models": repo, "/cache": tmp_path / "cache"})


def _fp32(name: str, values: np.ndarray) -> dict[str, Any]:
    return {"name": name, "shape": list(values.shape), "datatype": "FP32", "data": values.tolist()}


async def _infer(
    session: aiohttp.ClientSession, url: str, model: str, *inputs: dict[str, Any]
) -> dict[str, np.ndarray]:
    async with session.post(f"{url}/v2/models/{model}/infer", json={"inputs": inputs}) as resp:
        body = await resp.json()
        assert resp.status == 200, body
    return {out["name"]: np.array(out["data"], np.float32) for out in body["outputs"]}


async def _successes(session: aiohttp.ClientSession, url: str, model: str) -> int:
    async with session.get(f"{url}/v2/models/{model}/stats") as resp:
        stats = await resp.json()
    return int(stats["model_stats"][0]["inference_stats"]["success"]["count"])


async def test_bls_calls_and_ensemble_steps_wake_the_called_model_in_its_own_pod(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubeconfig_path: Path,
    fleet: LocalKubelet,
    repo: Path,
) -> None:
    apps = client.AppsV1Api(kube_api)
    await apps.create_namespaced_deployment(NAMESPACE, pool_deployment(0))
    up = await asyncio.to_thread(
        UpProcess, repo, *up_args(kubeconfig_path, activator_id="activator-0")
    )
    try:
        # The pool's pods know the front door as the chart tells them the activators' Service.
        manifest = pool_deployment(
            3, extra_args=["--front-door", up.url, "--ensemble-steps-url", up.url]
        )
        current = await apps.read_namespaced_deployment(POOL, NAMESPACE)
        manifest["metadata"]["resourceVersion"] = current.metadata.resource_version
        await apps.replace_namespaced_deployment(POOL, NAMESPACE, manifest)
        await eventually(lambda: len(ready_pool_pods(kube_apiserver)) == 3, timeout_s=90)
        assert not model_pods(kube_apiserver, "add_sub")
        x = np.arange(4, dtype=np.float32)
        timeout = aiohttp.ClientTimeout(total=180)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session:
                # BLS: `caller` wakes in one pod, its call to `add_sub` wakes `add_sub` in another.
                got = await _infer(session, up.url, "caller", _fp32("INPUT0", x))
                np.testing.assert_allclose(got["OUTPUT0"], x + x)
                (caller_pod,) = model_pods(kube_apiserver, "caller")
                (adder_pod,) = model_pods(kube_apiserver, "add_sub")
                assert caller_pod["metadata"]["name"] != adder_pod["metadata"]["name"]
                assert await _successes(session, up.url, "add_sub") == 1

                # Ensemble: its step runs on the `add_sub` pod, not in the ensemble's own.
                b = np.full(4, 10, dtype=np.float32)
                got = await _infer(session, up.url, "pipeline", _fp32("A", x), _fp32("B", b))
                np.testing.assert_allclose(got["DIFF"], x - b)
                assert len(model_pods(kube_apiserver, "pipeline")) == 1
                assert [p["metadata"]["name"] for p in model_pods(kube_apiserver, "add_sub")] == [
                    adder_pod["metadata"]["name"]
                ]
                assert await _successes(session, up.url, "add_sub") == 2
        except AssertionError as exc:  # a failure seen once (a stub died): keep the pods' logs
            logs = "\n".join(
                f"--- pod {name}\n{fleet.logs(NAMESPACE, name)[-6000:]}"
                for model in ("caller", "add_sub", "pipeline")
                for name in (p["metadata"]["name"] for p in model_pods(kube_apiserver, model))
            )
            raise AssertionError(f"{exc}\n{logs}") from exc
    finally:
        up.stop()
    assert "Traceback" not in up.log(), up.log()
