"""A replica's log lines in `thaw up`'s own log (activator/scaler/local/replica_log.py): a
Python model's `pb_utils.Logger` lines reach the operator's `--log-file` at their severity,
named for the replica, under the log settings `thaw up` keeps and pushes to its replicas."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.fixtures.models import make_python_logger
from tests.fixtures.up_process import UpProcess

pytestmark = pytest.mark.integration


@pytest.fixture
def up(tmp_path: Path) -> Iterator[tuple[UpProcess, Path]]:
    repo = tmp_path / "repo"
    make_python_logger(repo)
    log_file = tmp_path / "up.log"
    server = UpProcess(
        repo, "--warm-pool", "1", "--preload-frameworks", "", "--no-image-build",
        "--log-file", str(log_file),
    )  # fmt: skip
    yield server, log_file
    server.stop()


def _infer(server: UpProcess) -> None:
    client = httpclient.InferenceServerClient(server.hostport)
    x = httpclient.InferInput("INPUT0", [2], "FP32")
    x.set_data_from_numpy(np.ones(2, np.float32))
    assert client.infer("logging_model", [x]).as_numpy("OUTPUT0").tolist() == [1.0, 1.0]


def _lines(log_file: Path, text: str) -> list[str]:
    return [line for line in log_file.read_text().splitlines() if text in line]


def test_a_python_models_log_lines_reach_thaw_ups_log_under_its_settings(
    up: tuple[UpProcess, Path],
) -> None:
    server, log_file = up
    _infer(server)  # wakes it; by default info and warnings pass, as tritonserver's
    server.wait_for(lambda: _lines(log_file, "a warning line"), 30, "the model's warning")
    server.wait_for(lambda: _lines(log_file, "an info line"), 30, "the model's info line")
    # tritonserver's record, with the replica's process id and the model's file and line; the
    # message, named for the replica, escaped once.
    record = r'%s\d{4} \d\d:\d\d:\d\d\.\d{6} (\d+) model\.py:\d+\] "logging_model-\d+ [^"]*"'
    (warning,) = _lines(log_file, "a warning line")
    found = re.fullmatch(record % "W", warning)
    assert found is not None, warning
    assert int(found.group(1)) != server.proc.pid  # the replica's, not thaw up's
    (info,) = _lines(log_file, "an info line")
    assert re.fullmatch(record % "I", info), info
    http = httpclient.InferenceServerClient(server.hostport)
    http.update_log_settings({"log_info": False})  # reaches the warm replica too
    replica = server.model("logging_model")["replicas"][0]["url"]
    server.wait_for(
        lambda: (
            not (
                httpclient.InferenceServerClient(replica.split("//")[1]).get_log_settings()[
                    "log_info"
                ]
            )
        ),
        30,
        "the pushed settings",
    )
    _infer(server)
    server.wait_for(lambda: len(_lines(log_file, "a warning line")) == 2, 30, "a 2nd warning")
    assert len(_lines(log_file, "an info line")) == 1  # info is off now, on the replica too


_LOUD_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            pb_utils.Logger.log_warn("loud " + "x" * int(x[0]))
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)]))
        return responses
"""


def test_a_log_line_over_the_pipes_limit_is_cut_and_the_replica_keeps_answering(
    tmp_path: Path,
) -> None:
    """A replica's line longer than the reader's limit ended the relay (asyncio's readline
    raised): the replica then blocked writing its log once the pipe was full, and every request
    after timed out. It is cut now, and the lines after it arrive."""
    repo = tmp_path / "repo"
    (repo / "loud" / "1").mkdir(parents=True)
    (repo / "loud" / "config.pbtxt").write_text(
        'backend: "python"\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    )
    (repo / "loud" / "1" / "model.py").write_text(_LOUD_MODEL)
    log_file = tmp_path / "up.log"
    server = UpProcess(
        repo, "--warm-pool", "1", "--preload-frameworks", "", "--no-image-build",
        "--log-file", str(log_file),
    )  # fmt: skip
    try:
        client = httpclient.InferenceServerClient(server.hostport, network_timeout=60)

        def infer(size: int) -> None:
            x = httpclient.InferInput("IN", [1], "FP32")
            x.set_data_from_numpy(np.array([size], np.float32))
            assert client.infer("loud", [x]).as_numpy("OUT").tolist() == [size]

        infer(2_000_000)  # one line of 2 MB: over any reader's limit
        for _ in range(30):  # 3 MB more: more than a pipe holds once nobody reads it
            infer(100_000)
        server.wait_for(lambda: len(_lines(log_file, "loud x")) == 31, 30, "31 log lines")
        assert len(_lines(log_file, "[cut: the line was longer than the reader's limit]")) == 1
    finally:
        server.stop()
