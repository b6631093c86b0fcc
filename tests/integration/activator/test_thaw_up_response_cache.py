"""`thaw up --cache-config` / `--response-cache-byte-size`, as on `thaw serve` (Triton's
qa/L0_response_cache through the front door): each replica gets the cache, so a repeated request
to a model with `response_cache { enable: true }` is answered from it, and the flags are refused
at start with Triton's texts. `--load-model` (explicit mode) wakes a model at start; one the
replica refuses (decoupled, with the cache) refuses the start, as tritonserver's does."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.fixtures import models
from tests.fixtures.up_process import UpProcess, with_params
from thawwire.model_control import LOAD_MODEL_NOT_EXPLICIT

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("up_response_cache")
    cached = models.make_lazy_init(
        repo, "cached", lazy_s=0.0, warmup="response_cache { enable: true }"
    )
    with_params(cached, scale_to_zero_grace_s=300)
    decoupled = models.make_python_identity(repo, "decoupled_cached")
    models.write_config(
        decoupled,
        (decoupled / "config.pbtxt").read_text()
        + "response_cache { enable: true }\nmodel_transaction_policy { decoupled: true }\n",
    )
    return repo


@pytest.fixture(scope="module")
def up(repo: Path) -> Iterator[UpProcess]:
    server = UpProcess(
        repo, "--warm-pool", "1", "--preload-frameworks", "", "--no-image-build",
        "--cache", str(repo.parent / "cache"), "--cache-config", "local,size=65536",
    )  # fmt: skip
    yield server
    server.stop()


def _executions(client: httpclient.InferenceServerClient, value: float) -> int:
    tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.full([1, 4], value, dtype=np.float32))
    return int(client.infer("cached", [tensor]).as_numpy("EXECUTIONS")[0][0])


def test_a_repeated_request_is_answered_from_the_replicas_cache(up: UpProcess) -> None:
    assert up.model("cached")["replicas_desired"] == 0
    with httpclient.InferenceServerClient(up.hostport) as client:
        first = _executions(client, 1.0)  # wakes the model
        again = _executions(client, 1.0)
        other = _executions(client, 2.0)
        stats = client.get_inference_statistics("cached")["model_stats"][0]["inference_stats"]
    assert again == first  # not executed again: the cached answer
    assert other == first + 1
    assert stats["cache_hit"]["count"] == 1
    assert stats["cache_miss"]["count"] == 2


@pytest.mark.parametrize(
    ("flags", "text"),
    [
        (("--response-cache-byte-size=12345", "--cache-config=local,size=67890"),
         "Incompatible flags --response-cache-byte-size and --cache-config both provided."),
        (("--cache-config=local,size=8192", "--cache-config=redis,key=value"),
         "multiple cache configurations are not supported (local, redis)"),
        (("--cache-config=redis,host=x",), "only the 'local' cache is supported"),
    ],
)  # fmt: skip
def test_cache_flags_refused_at_start(repo: Path, flags: tuple[str, ...], text: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "thaw.cli", "up", str(repo), "--port", "0", *flags],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0
    assert text in proc.stderr


def _up(repo: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "thaw.cli", "up", str(repo), "--port", "0", "--warm-pool", "1",
         "--preload-frameworks", "", "--no-image-build", "--cache", str(repo.parent / "cache2"),
         *flags],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_load_model_that_cannot_load_refuses_the_start(repo: Path) -> None:
    proc = _up(
        repo, "--cache-config=local,size=65536", "--model-control-mode=explicit",
        "--load-model=decoupled_cached",
    )  # fmt: skip
    assert proc.returncode == 1
    assert "failed to load 'decoupled_cached'" in proc.stderr
    assert "Response cache does not currently support decoupled model" in proc.stderr


def test_load_model_wakes_the_model_at_start(repo: Path) -> None:
    server = UpProcess(
        repo, "--warm-pool", "1", "--preload-frameworks", "", "--no-image-build",
        "--cache", str(repo.parent / "cache3"), "--model-control-mode=explicit",
        "--load-model=cached",
    )  # fmt: skip
    try:
        assert server.model("cached")["replicas_ready"] >= 1
        assert server.model("decoupled_cached")["replicas_desired"] == 0
    finally:
        server.stop()


def test_load_model_needs_explicit_mode(repo: Path) -> None:
    proc = _up(repo, "--load-model=cached")
    assert proc.returncode == 2
    # tritonserver's words, as `thaw serve` says them.
    assert LOAD_MODEL_NOT_EXPLICIT in proc.stderr
