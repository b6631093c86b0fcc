"""benchmarks/native_front_spike (decision 0025's measurement spike): built with cargo from
Debian's packaged crates, it answers add_sub through Thaw's own stub process over HTTP (JSON,
and binary tensors to tritonclient.http) and gRPC (tritonclient.grpc), refuses a broken body
with a JSON error and goes on serving.

Slow (a cargo build); skipped where cargo or Debian's crates are missing (`apt-get install`
NativeSpikePeer.debian_packages).
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from benchmarks.peers import NativeSpikePeer, free_port
from benchmarks.workloads import add_sub_workload, write_add_sub

_CRATES = Path("/usr/share/cargo/registry")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("cargo") is None, reason="needs cargo"),
    pytest.mark.skipif(
        not any(_CRATES.glob("hyper-0.14*")), reason="needs Debian's crates (librust-hyper-dev)"
    ),
]


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_spike_answers_add_sub_through_thaw_s_stub_and_survives_a_bad_body(
    tmp_path: Path,
) -> None:
    write_add_sub(tmp_path)
    payload = add_sub_workload().payload
    sent = json.loads(payload.body)["inputs"]
    a, b = (np.asarray(i["data"], dtype=np.float32) for i in sent)
    handle = NativeSpikePeer().start(tmp_path, free_port(), timeout_s=300, grpc_port=free_port())
    try:
        status, bad = _post(handle.url + payload.path, b"{not json", {})
        assert status == 400 and "error" in bad
        for _ in range(3):
            status, answer = _post(handle.url + payload.path, payload.body, payload.headers)
            assert status == 200, answer
            outputs = {
                o["name"]: np.asarray(o["data"], dtype=np.float32) for o in answer["outputs"]
            }
            np.testing.assert_array_equal(outputs["OUTPUT0"], a + b)
            np.testing.assert_array_equal(outputs["OUTPUT1"], a - b)
        for client, module in (
            (httpclient.InferenceServerClient(handle.url.removeprefix("http://")), httpclient),
            (grpcclient.InferenceServerClient(handle.grpc_address), grpcclient),
        ):
            inputs = [module.InferInput(n, [16], "FP32") for n in ("INPUT0", "INPUT1")]
            for tensor, value in zip(inputs, (a, b), strict=True):
                tensor.set_data_from_numpy(value)  # binary over HTTP: tritonclient's default
            result = client.infer("add_sub", inputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
            client.close()
    finally:
        handle.stop()
