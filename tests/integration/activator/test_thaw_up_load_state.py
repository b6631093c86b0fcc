"""`thaw up --model-control-mode explicit`, for real on loopback, has Triton's load state
(docs/decisions/0024): a model neither `--load-model` nor `--load-model-at-zero` names is not
loaded — not ready, refused in `thaw serve`'s words on HTTP and gRPC, left out of statistics
and metrics, nothing woken — until a load; an unloaded one is refused with Triton's NOT_FOUND
until loaded again; a loaded model is ready at zero, woken by a request, and Thaw's
scale-to-zero call takes it to zero without unloading it."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import make_add_sub, make_slow_init
from tests.fixtures.up_process import UpProcess, light_args

pytestmark = pytest.mark.integration

_BODY: dict[str, Any] = {
    "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [1, 1, 1, 1]},
    ]
}


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    repo = tmp_path_factory.mktemp("load_state_repo")
    for name in ("at_zero", "later", "cycled"):
        make_add_sub(repo, name)
    server = UpProcess(
        repo,
        *light_args(repo),
        "--model-control-mode=explicit",
        "--load-model-at-zero=at_zero",
    )  # fmt: skip
    assert server.grpc_address, server.log()
    yield server
    server.stop()


def _infer(up: UpProcess, name: str) -> requests.Response:
    return requests.post(f"{up.url}/v2/models/{name}/infer", json=_BODY, timeout=120)


def _grpc_infer(client: grpcclient.InferenceServerClient, name: str) -> Any:
    inputs = [grpcclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
    for each in inputs:
        each.set_data_from_numpy(np.ones(4, dtype=np.float32))
    return client.infer(name, inputs)


def _index(up: UpProcess, name: str) -> list[dict[str, Any]]:
    rows = requests.post(f"{up.url}/v2/repository/index", timeout=60).json()
    return [r for r in rows if r["name"] == name]


def test_a_model_not_loaded_is_refused_everywhere_and_never_woken(up: UpProcess) -> None:
    r = _infer(up, "later")
    assert r.status_code == 503, r.text
    assert r.json() == {"error": "model 'later' is not ready"}
    for path in ("", "/config", "/stats"):
        assert requests.get(f"{up.url}/v2/models/later{path}", timeout=60).status_code == 503
    assert requests.get(f"{up.url}/v2/models/later/ready", timeout=60).status_code != 200
    assert _index(up, "later") == [{"name": "later"}]  # Triton's row for a model never loaded
    every = requests.get(f"{up.url}/v2/models/stats", timeout=60).json()["model_stats"]
    assert "later" not in {row["name"] for row in every}
    metrics = up.metrics()
    assert 'nv_inference_count{model="at_zero",' in metrics  # loaded: Triton's counters at 0
    assert 'nv_inference_count{model="later",' not in metrics  # not loaded: none, as Triton
    with grpcclient.InferenceServerClient(up.grpc_address) as client:
        with pytest.raises(InferenceServerException) as info:
            _grpc_infer(client, "later")
        assert info.value.status() == "StatusCode.UNAVAILABLE"
        assert not client.is_model_ready("later")
    assert up.model("later")["replicas_ready"] == 0


def test_unload_refuses_until_loaded_again(up: UpProcess) -> None:
    with httpclient.InferenceServerClient(up.hostport, network_timeout=120.0) as client:
        client.load_model("cycled")  # loaded and warmed, as Triton's load returns loaded
        assert client.is_model_ready("cycled")
        assert up.model("cycled")["replicas_ready"] >= 1
        assert _infer(up, "cycled").status_code == 200
        client.unload_model("cycled")
        assert up.model("cycled")["replicas_ready"] == 0
        assert not client.is_model_ready("cycled")
        r = _infer(up, "cycled")
        assert r.status_code == 404, r.text
        assert r.json() == {
            "error": "Request for unknown model: 'cycled' has no available versions"
        }
        assert {(row["state"], row.get("reason")) for row in _index(up, "cycled")} == {
            ("UNAVAILABLE", "unloaded")
        }
        with grpcclient.InferenceServerClient(up.grpc_address) as grpc_client:
            with pytest.raises(InferenceServerException) as info:
                _grpc_infer(grpc_client, "cycled")
            assert info.value.status() == "StatusCode.NOT_FOUND"
        assert up.model("cycled")["replicas_ready"] == 0  # nothing was woken
        client.load_model("cycled")
        assert _infer(up, "cycled").status_code == 200
        assert {row["state"] for row in _index(up, "cycled")} == {"READY"}


def test_a_model_loaded_at_zero_wakes_and_scale_to_zero_keeps_it_loaded(up: UpProcess) -> None:
    assert up.model("at_zero")["replicas_ready"] == 0  # loaded, not woken at start
    assert requests.get(f"{up.url}/v2/models/at_zero/ready", timeout=60).status_code == 200
    assert _infer(up, "at_zero").status_code == 200  # woken by its request
    assert up.model("at_zero")["replicas_ready"] == 1
    r = requests.post(f"{up.url}/thaw/models/at_zero/scale-to-zero", timeout=60)
    assert r.status_code == 200, r.text
    assert up.model("at_zero")["replicas_ready"] == 0
    assert requests.get(f"{up.url}/v2/models/at_zero/ready", timeout=60).status_code == 200
    assert _infer(up, "at_zero").status_code == 200
    # Only a loaded model can be taken to zero so; an unknown one is 404.
    r = requests.post(f"{up.url}/thaw/models/nope/scale-to-zero", timeout=60)
    assert r.status_code == 404 and "error" in r.json()


def test_load_model_at_zero_needs_explicit_mode(tmp_path: Path) -> None:
    make_add_sub(tmp_path, "m")
    with pytest.raises(RuntimeError, match="--load-model-at-zero needs --model-control-mode"):
        UpProcess(tmp_path, "--warm-pool", "0", "--no-image-build", "--load-model-at-zero=m")


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("nope", "failed to poll model 'nope': model not found in any model repository"),
        ("../m", "failed to poll model '../m': model not found in any model repository"),
        ("", "Invalid model name"),
    ],
)
def test_load_model_at_zero_naming_no_model_refuses_the_start(
    tmp_path: Path, name: str, why: str
) -> None:
    make_add_sub(tmp_path, "m")  # as --load-model's, in tritonserver's words
    with pytest.raises(RuntimeError, match="thaw up did not start") as refused:
        UpProcess(
            tmp_path, "--warm-pool", "0", "--no-image-build", "--model-control-mode=explicit",
            f"--load-model-at-zero={name}",
        )  # fmt: skip
    assert f"thaw up: error: {why}" in str(refused.value)


def test_an_unload_during_a_wake_refuses_the_held_request_and_leaves_no_replica(
    tmp_path: Path,
) -> None:
    """The unload comes while a request waits for its model's replica to start: the request
    gets the unload's 404, and the replica, once up, is stopped unused, long before the idle
    grace (600 s here) that would otherwise keep it running for a model no one can call."""
    repo = tmp_path / "repo"
    # The start takes 8 s (its initialize): the unload comes well within them.
    make_slow_init(repo, "waking", delay_s=8.0)
    up = UpProcess(
        repo, *light_args(repo), "--model-control-mode=explicit",
        "--load-model-at-zero=waking", "--scale-to-zero-grace-s", "600",
    )  # fmt: skip
    try:
        body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2], "data": [1, 2]}]}
        with ThreadPoolExecutor(1) as pool:
            held = pool.submit(
                requests.post, f"{up.url}/v2/models/waking/infer", json=body, timeout=120
            )
            up.wait_for(lambda: up.model("waking")["held_requests"] == 1, 60, "a held request")
            r = requests.post(f"{up.url}/v2/repository/models/waking/unload", timeout=60)
            assert r.status_code == 200, r.text
            answer = held.result(timeout=60)
        assert answer.status_code == 404, answer.text
        assert answer.json() == {
            "error": "Request for unknown model: 'waking' has no available versions"
        }
        assert up.model("waking")["replicas_starting"] == 1  # still starting: ends after

        def nothing_left() -> bool:
            row = up.model("waking")
            return (row["replicas_ready"], row["replicas_starting"]) == (0, 0)

        up.wait_for(nothing_left, 60, "the late start stopped")
        assert "started before its model was changed or unloaded: stopped" in up.log()
    finally:
        up.stop()
