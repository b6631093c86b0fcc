"""tritonserver's `--model-load-retry-count`: a model version whose load fails is tried that many
more times; the model is READY when a try succeeds, and fails with the last try's error when
none does."""

from __future__ import annotations

import json
import textwrap
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.serve_process import ServeProcess
from tests.fixtures.up_process import UpProcess, light_args

pytestmark = pytest.mark.integration

_FLAKY = """
import os
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        tries = os.path.join(args["model_repository"], "tries")
        count = int(open(tries).read()) if os.path.exists(tries) else 0
        with open(tries, "w") as f:
            f.write(str(count + 1))
        if count < {failures}:
            raise RuntimeError(f"flaky start {{count + 1}}")

    def execute(self, requests):
        out = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", data)]))
        return out
"""


def _flaky(repo: Path, name: str, failures: int) -> Path:
    model = repo / name
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(textwrap.dedent(_FLAKY.format(failures=failures)))
    (model / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    )
    return model


def _index(url: str) -> dict[str, str]:
    """The repository index's states, once no model is loading any more."""
    deadline = time.monotonic() + 120
    while True:
        request = urllib.request.Request(f"{url}/v2/repository/index", data=b"{}")
        with urllib.request.urlopen(request, timeout=30) as answer:
            states = {row["name"]: row.get("state", "") for row in json.loads(answer.read())}
        if all(s in ("READY", "UNAVAILABLE") for s in states.values()):
            return states
        assert time.monotonic() < deadline, states
        time.sleep(0.2)


def test_a_failing_load_is_tried_again(
    start_serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    recovers = _flaky(tmp_path, "recovers", failures=2)
    never = _flaky(tmp_path, "never", failures=5)
    server = start_serve(tmp_path, "--model-load-retry-count=2", ready=False)
    assert _index(server.url) == {"never": "UNAVAILABLE", "recovers": "READY"}
    assert (recovers / "tries").read_text() == "3"  # 2 failures, then a success
    assert (never / "tries").read_text() == "3"  # the first try and 2 more
    assert "flaky start 3" in server.logs()  # the last try's error is the load's


def test_without_the_flag_a_load_is_tried_once(
    start_serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    once = _flaky(tmp_path, "once", failures=1)
    server = start_serve(tmp_path, ready=False)
    assert _index(server.url) == {"once": "UNAVAILABLE"}
    assert (once / "tries").read_text() == "1"


def test_thaw_up_gives_the_count_to_its_replicas(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    model = _flaky(repo, "wakes", failures=1)
    up = UpProcess(repo, *light_args(repo), "--model-load-retry-count", "1")
    try:
        body = {"inputs": [{"name": "IN", "datatype": "FP32", "shape": [1], "data": [2.5]}]}
        request = urllib.request.Request(
            f"{up.url}/v2/models/wakes/infer", data=json.dumps(body).encode()
        )
        with urllib.request.urlopen(request, timeout=120) as answer:  # wakes it: 2 tries
            assert json.loads(answer.read())["outputs"][0]["data"] == [2.5]
        assert (model / "tries").read_text() == "2"
    finally:
        up.stop()
