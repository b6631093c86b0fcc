"""Model warm-up at load and the response cache, in a real `thaw serve`.

`make_lazy_init` models pay a second of lazy initialisation on their first execute and count
their executions, so a test sees both that warm-up ran before the model was ready and that a
cached answer executed nothing.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests

from tests.fixtures import models
from tests.fixtures.serve_process import ServeProcess
from tests.support.scheduling_client import fp32, infer, metric

pytestmark = pytest.mark.integration

LAZY_S = 1.5
CACHE_BYTES = 64 * 1024


def _warmup(inputs: str, *, batch_size: int = 2, count: int = 3) -> str:
    return (
        f'model_warmup [ {{ name: "sample" batch_size: {batch_size} count: {count} '
        f'inputs {{ key: "INPUT0" value: {{ {inputs} }} }} }} ]'
    )


RANDOM = "data_type: TYPE_FP32 dims: [ 4 ] random_data: true"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("warmup_cache")
    models.make_lazy_init(repo, "warmed", lazy_s=LAZY_S, warmup=_warmup(RANDOM))
    models.make_lazy_init(repo, "cold", lazy_s=LAZY_S)
    from_file = models.make_lazy_init(
        repo, "from_file", lazy_s=0.0, warmup=_warmup(
            'data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "four_floats"', count=1)
    )  # fmt: skip
    (from_file / "warmup").mkdir()
    (from_file / "warmup" / "four_floats").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    short = models.make_lazy_init(
        repo, "short_file", lazy_s=0.0, warmup=_warmup(
            'data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "three_bytes"', count=1)
    )  # fmt: skip
    (short / "warmup").mkdir()
    (short / "warmup" / "three_bytes").write_bytes(b"abc")
    variable = _warmup("data_type: TYPE_FP32 dims: [ -1 ] zero_data: true")
    models.make_lazy_init(repo, "variable", lazy_s=0.0, warmup=variable)
    models.make_lazy_init(repo, "cached", lazy_s=0.0, warmup="response_cache { enable: true }")
    models.make_lazy_init(repo, "uncached", lazy_s=0.0)
    return repo


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServeProcess]:
    args = ["--model-control-mode", "explicit", "--cache-config", f"local,size={CACHE_BYTES}"]
    for name in ("warmed", "cold", "from_file", "cached", "uncached"):
        args += ["--load-model", name]
    proc = ServeProcess(repo, *args)
    try:
        proc.wait_ready()
        yield proc
    finally:
        rc = proc.stop()
    assert rc == 0, proc.logs()


ROW = [fp32("INPUT0", [1.0, 2.0, 3.0, 4.0])]


def test_warm_up_runs_before_ready_so_the_first_request_pays_nothing(
    server: ServeProcess,
) -> None:
    first = infer(server.url, "warmed", ROW)
    assert first.status == 200
    assert first.output("EXECUTIONS") == [4]  # count 3 executions of the sample, then this
    assert first.output("ROWS") == [7]  # each of batch_size 2, then this one request
    cold = infer(server.url, "cold", ROW)  # the same model without warm-up pays it now
    assert cold.elapsed_s >= LAZY_S * 0.9 and cold.output("EXECUTIONS") == [1]
    # The lazy second was paid at load: measured against the cold one of this run, not a
    # wall-clock bound (LAZY_S / 2 before) that a loaded machine's stall outlasts.
    assert first.elapsed_s < cold.elapsed_s, (first.elapsed_s, cold.elapsed_s)
    seconds = metric(server.url, "thaw_model_warmup_duration_seconds", model="warmed")
    assert seconds >= LAZY_S * 0.9
    # Warm-up executions are not requests: Triton's statistics do not count them.
    assert metric(server.url, "nv_inference_exec_count", model="warmed") == 1


def test_a_load_answer_reports_the_warm_up_time(server: ServeProcess) -> None:
    answer = requests.post(f"{server.url}/v2/repository/models/warmed/load", json={}, timeout=60)
    assert answer.status_code == 200
    assert float(answer.headers["Thaw-Model-Warmup-Seconds"]) >= LAZY_S * 0.9
    plain = requests.post(f"{server.url}/v2/repository/models/uncached/load", json={}, timeout=60)
    assert "Thaw-Model-Warmup-Seconds" not in plain.headers


def test_warm_up_data_can_come_from_a_file(server: ServeProcess) -> None:
    assert infer(server.url, "from_file", ROW).output("ROWS") == [3]


@pytest.mark.parametrize(
    ("model", "fragment"),
    [
        ("short_file", "Expected 16, got 3"),
        ("variable", "warmup setting expects all variable-size dimensions are specified"),
    ],
)
def test_a_sample_that_cannot_be_built_fails_the_load(
    server: ServeProcess, model: str, fragment: str
) -> None:
    answer = requests.post(f"{server.url}/v2/repository/models/{model}/load", json={}, timeout=60)
    assert answer.status_code == 400
    assert fragment in answer.json()["error"]


def test_an_identical_request_is_answered_from_the_cache(server: ServeProcess) -> None:
    first = infer(server.url, "cached", ROW)
    again = infer(server.url, "cached", ROW)
    other = infer(server.url, "cached", [fp32("INPUT0", [9.0, 9.0, 9.0, 9.0])])
    assert first.output("EXECUTIONS") == again.output("EXECUTIONS") == [1]  # no execution
    assert again.output("OUTPUT0") == [1.0, 2.0, 3.0, 4.0]
    assert other.output("EXECUTIONS") == [2]  # other bytes: a miss, executed
    assert metric(server.url, "nv_cache_num_hits_per_model", model="cached") == 1
    assert metric(server.url, "nv_cache_num_misses_per_model", model="cached") == 2
    assert metric(server.url, "nv_cache_hit_duration_per_model", model="cached") >= 0
    # Triton: a hit is a success but no inference and no execution.
    assert metric(server.url, "nv_inference_request_success", model="cached") == 3
    assert metric(server.url, "nv_inference_count", model="cached") == 2
    stats = requests.get(f"{server.url}/v2/models/cached/stats", timeout=30).json()
    inference = stats["model_stats"][0]["inference_stats"]
    assert inference["cache_hit"]["count"] == 1 and inference["cache_miss"]["count"] == 2


def test_a_model_without_response_cache_is_never_cached(server: ServeProcess) -> None:
    runs = [infer(server.url, "uncached", ROW).output("EXECUTIONS")[0] for _ in range(2)]
    assert runs == [1, 2]
    text = requests.get(f"{server.url}/metrics", timeout=30).text
    assert 'nv_cache_num_hits_per_model{model="uncached"' not in text


def test_an_unknown_cache_is_refused_at_start(repo: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "thaw.cli", "serve", str(repo), "--cache-config", "redis,host=x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "only the 'local' cache is supported" in proc.stderr
