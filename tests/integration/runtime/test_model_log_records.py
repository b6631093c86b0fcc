"""A Python model's `pb_utils.Logger` lines in `thaw serve`'s ISO8601 log are Triton 2.51's
records (docs/triton-http-parity.md, "A sixteenth side by side"): the model's own file and
line, Triton's severity letter (a verbose line is an I line), the message quoted with its
quotes and newlines escaped; in a stub and in process."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path

import pytest

from tests.fixtures.models import python_model
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

_LOGS = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        pb_utils.Logger.log_info("an info")
        pb_utils.Logger.log_warn('a "quoted"\\nwarning')
        pb_utils.Logger.log_error("an error")
        pb_utils.Logger.log_verbose("a verbose")
        return [
            pb_utils.InferenceResponse([pb_utils.get_input_tensor_by_name(r, "IN")])
            for r in requests
        ]
"""
_IO = """
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""
# Triton 2.51's record, to the time and process id.
_RECORD = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ([IWE]) \d+ (\S+)\] (.*)"


@pytest.mark.parametrize("runtime", ["process", "in_process"])
def test_a_models_log_lines_are_tritons_iso8601_records(tmp_path: Path, runtime: str) -> None:
    repo = tmp_path / "repo"
    where = f'parameters {{ key: "thaw.python_runtime" value: {{ string_value: "{runtime}" }} }}\n'
    python_model(repo, "m", f'name: "m"\nbackend: "python"\n{_IO}{where}', _LOGS)
    log = tmp_path / "server.log"
    server = ServeProcess(
        repo, "--log-format", "ISO8601", "--log-verbose", "1", "--log-file", str(log)
    )
    try:
        server.wait_ready(120)
        body = {"inputs": [{"name": "IN", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
        post = urllib.request.Request(
            f"{server.url}/v2/models/m/infer", json.dumps(body).encode(), method="POST"
        )
        with urllib.request.urlopen(post, timeout=60) as answer:
            assert answer.status == 200
        deadline = time.monotonic() + 30  # a stub's lines cross to the server first
        while "a verbose" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        server.stop()
    records = [re.fullmatch(_RECORD, line) for line in log.read_text().splitlines()]
    model_lines = [m.groups() for m in records if m and m.group(2).startswith("model.py:")]
    assert model_lines == [
        ("I", "model.py:6", '"an info"'),
        ("W", "model.py:7", r'"a \"quoted\"\nwarning"'),
        ("E", "model.py:8", '"an error"'),
        ("I", "model.py:9", '"a verbose"'),
    ], log.read_text()
