"""tritonserver's `--reuse-http-port` / `--reuse-grpc-port` on `thaw up`: two real front doors
share one HTTP and one gRPC port, the kernel spreads new connections between them, and each
wakes its own replica for what reaches it."""

from __future__ import annotations

import re
import socket
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.fixtures.models import make_add_sub
from tests.fixtures.serve_process import free_port
from tests.fixtures.up_process import UpProcess, light_args

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not hasattr(socket, "SO_REUSEPORT"), reason="no SO_REUSEPORT here"),
]

_REQUESTS = 24  # each on a new connection: all 24 on one front door has odds of 2 in 2**24


def _successes(up: UpProcess) -> float:
    with urllib.request.urlopen(up.metrics_url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    found = re.search(r'^nv_inference_request_success\{model="add_sub",.*\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def test_two_thaw_ups_share_the_ports_and_both_serve(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    http_port, grpc_port = free_port(), free_port()
    shared = ("--port", str(http_port), "--grpc-port", str(grpc_port), "--metrics-port", "0",
              "--reuse-http-port=true", "--reuse-grpc-port=true")  # fmt: skip
    ups = []
    try:
        for _ in range(2):
            repo = tmp_path_factory.mktemp("reuse_repo")
            make_add_sub(repo)
            ups.append(UpProcess(repo, *light_args(repo), *shared))
        a = np.arange(4, dtype=np.float32)
        for _ in range(_REQUESTS):
            inputs = [httpclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
            for tensor in inputs:
                tensor.set_data_from_numpy(a)
            with httpclient.InferenceServerClient(f"127.0.0.1:{http_port}") as client:
                result = client.infer("add_sub", inputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
        with grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}") as client:
            assert client.is_server_ready()
        counts = [_successes(up) for up in ups]
        assert sum(counts) == _REQUESTS and min(counts) > 0, counts
    finally:
        for up in ups:
            assert up.stop() == 0, up.log()
