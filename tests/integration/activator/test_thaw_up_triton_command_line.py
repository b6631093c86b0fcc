"""A tritonserver launch line on `thaw up`: `--http-port`, each port's `--*-address`, the device
flags it gives every replica and the flags it logs as without effect — a real `thaw up` starts
with them, wakes a model and answers on all three ports; an address it cannot bind stops the
start naming it."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.fixtures.models import make_add_sub
from tests.fixtures.up_process import UpProcess, light_args

pytestmark = pytest.mark.integration


def test_thaw_up_takes_a_tritonserver_launch_line(tmp_path_factory: pytest.TempPathFactory) -> None:
    repo = tmp_path_factory.mktemp("triton_line_repo")
    make_add_sub(repo)
    line = (
        "--http-port=0", "--http-address=127.0.0.1", "--grpc-port=0", "--grpc-address=127.0.0.1",
        "--metrics-port=0", "--metrics-address=127.0.0.1", "--allow-http=true",
        "--http-thread-count=4", "--buffer-manager-thread-count=2", "--host-policy=numa,x=0",
        "--model-load-thread-count=2", "--pinned-memory-pool-byte-size=0",
    )  # fmt: skip
    up = UpProcess(repo, *light_args(repo), *line)
    try:
        a = np.arange(4, dtype=np.float32)
        inputs = [httpclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(a)
        with httpclient.InferenceServerClient(up.url.removeprefix("http://")) as client:
            result = client.infer("add_sub", inputs)  # wakes a replica given the device flags
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
        with grpcclient.InferenceServerClient(up.grpc_address) as client:
            assert client.is_model_ready("add_sub")
        with urllib.request.urlopen(up.metrics_url + "/metrics", timeout=10) as response:
            assert b"nv_inference_request_success" in response.read()
        log = up.log()
        assert "ignoring tritonserver flag --http-thread-count=4: thaw's HTTP server runs" in log
        assert "ignoring tritonserver flag --host-policy=numa,x=0" in log
    finally:
        up.stop()


@pytest.mark.parametrize(
    ("flag", "says"),
    [
        ("--grpc-address=256.1.1.1", "cannot listen for gRPC on 256.1.1.1:0"),
        ("--metrics-address=no.such.host.invalid", "cannot listen on no.such.host.invalid:0"),
        ("--http-address=::zz", "cannot listen on ::zz:0"),
    ],
)
def test_an_address_no_port_can_bind_stops_the_start_naming_it(
    tmp_path: Path, flag: str, says: str
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "thaw.cli", "up", str(tmp_path), "--port", "0", "--warm-pool", "0",
         "--no-image-build", "--cache", str(tmp_path / "cache"), flag],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1
    assert f"thaw up: error: {says}" in proc.stderr
