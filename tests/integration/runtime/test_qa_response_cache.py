"""What Triton's qa/L0_response_cache expects of `thaw serve`, over real HTTP/gRPC with
tritonclient: a reload keeps the model's statistics, a decoupled model (or an ensemble that
steps into one) with the cache on is refused, and the cache flags are refused as Triton's are.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures import models
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

_CACHE = "response_cache { enable: true }\n"
_DECOUPLED = "model_transaction_policy { decoupled: true }\n"


def _step_ensemble(repo: Path, name: str, step: str, extra: str = "") -> None:
    models.make_ensemble(repo, name, f'''
        name: "{name}"
        platform: "ensemble"
        max_batch_size: 0
        input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
        output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
        ensemble_scheduling {{ step [ {{ model_name: "{step}" model_version: -1
            input_map {{ key: "INPUT0" value: "INPUT0" }}
            output_map {{ key: "OUTPUT0" value: "OUTPUT0" }} }} ] }}
        {extra}
    ''')  # fmt: skip


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("qa_response_cache")
    cached = models.make_python_identity(repo, "cached")
    models.write_config(cached, (cached / "config.pbtxt").read_text() + _CACHE)
    decoupled = models.make_python_identity(repo, "decoupled_cached")
    text = (decoupled / "config.pbtxt").read_text()
    models.write_config(decoupled, text + _CACHE + _DECOUPLED)
    step = models.make_python_identity(repo, "decoupled_step")
    models.write_config(step, (step / "config.pbtxt").read_text() + _DECOUPLED)
    _step_ensemble(repo, "ensemble_of_decoupled", "decoupled_step", _CACHE)
    _step_ensemble(repo, "ensemble_uncached_of_decoupled", "decoupled_step")
    return repo


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServeProcess]:
    proc = ServeProcess(
        repo, "--model-control-mode=explicit", "--cache-config=local,size=65536",
        "--load-model=cached",
    )  # fmt: skip
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()


def test_a_reloaded_model_keeps_its_statistics(server: ServeProcess) -> None:
    # ensemble_cache_test.py loads a model already loaded (as an ensemble's step), then reads
    # its statistics: the reload's fresh counters must not be dropped with the old version's.
    client = grpcclient.InferenceServerClient(server.grpc_address)
    client.load_model("cached")
    stats = client.get_inference_statistics("cached", as_json=True)
    assert [row["version"] for row in stats["model_stats"]] == ["1"]
    data = np.ones(4, np.float32)
    inputs = [grpcclient.InferInput("INPUT0", [4], "FP32")]
    inputs[0].set_data_from_numpy(data)
    for _ in range(2):
        client.infer("cached", inputs)
    row = client.get_inference_statistics("cached", as_json=True)["model_stats"][0]
    assert row["inference_stats"]["cache_miss"]["count"] == "1"
    assert row["inference_stats"]["cache_hit"]["count"] == "1"


@pytest.mark.parametrize(
    ("model", "fragment"),
    [
        ("decoupled_cached", "Response cache does not currently support decoupled model "
                             "'decoupled_cached'"),
        ("ensemble_of_decoupled", "Response cache does not currently support decoupled step "
                                  "'decoupled_step' of ensemble 'ensemble_of_decoupled'"),
    ],
)  # fmt: skip
def test_a_decoupled_model_with_the_cache_is_refused(
    server: ServeProcess, model: str, fragment: str
) -> None:
    client = httpclient.InferenceServerClient(server.hostport)
    with pytest.raises(InferenceServerException) as refused:
        client.load_model(model)
    assert fragment in str(refused.value)
    assert not client.is_model_ready(model)


def test_a_decoupled_step_of_an_uncached_ensemble_loads(server: ServeProcess) -> None:
    client = httpclient.InferenceServerClient(server.hostport)
    client.load_model("ensemble_uncached_of_decoupled")
    assert client.is_model_ready("ensemble_uncached_of_decoupled")


@pytest.mark.parametrize(
    ("flags", "text"),
    [
        (("--response-cache-byte-size=12345", "--cache-config=local,size=67890"),
         "Incompatible flags --response-cache-byte-size and --cache-config both provided. "
         "Please provide one or the other."),
        (("--cache-config=local,size=8192", "--cache-config=redis,key=value"),
         "multiple cache configurations are not supported (local, redis)"),
    ],
)  # fmt: skip
def test_cache_flags_refused_as_triton_refuses_them(
    repo: Path, flags: tuple[str, ...], text: str
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "thaw.cli", "serve", str(repo), "--port", "0", *flags],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert text in proc.stderr
