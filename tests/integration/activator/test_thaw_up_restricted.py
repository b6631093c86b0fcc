"""`thaw up --http-restricted-api` / `--grpc-restricted-protocol` (issue 22: authentication in
front of the models): the spelling and answers of `thaw serve` (Triton's), applied at the
activator's front doors — a refused request wakes nothing, a warm model's new connection is
not handed to a replica (its later requests would skip the check), open categories stay open."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import make_add_sub
from tests.fixtures.up_process import UpProcess, light_args, with_params

pytestmark = pytest.mark.integration

KEY, SECRET = "api-key", "s3cret"
BODY = json.dumps(
    {
        "inputs": [
            {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]},
            {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": [1, 1, 1, 1]},
        ]
    }
)


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    repo = tmp_path_factory.mktemp("restricted_repo")
    with_params(make_add_sub(repo), scale_to_zero_grace_s=300)
    server = UpProcess(
        repo,
        *light_args(repo),
        "--model-control-mode", "explicit",
        "--load-model-at-zero=*",  # every model servable at zero, none woken at start
        "--http-restricted-api", f"inference,model-repository:{KEY}={SECRET}",
        "--grpc-restricted-protocol", f"inference:{KEY}={SECRET}",
    )  # fmt: skip
    yield server
    server.stop()


def _infer(conn: http.client.HTTPConnection, headers: dict[str, str]) -> tuple[int, dict]:
    conn.request(
        "POST", "/v2/models/add_sub/infer", BODY, {"Content-Type": "application/json", **headers}
    )
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read())


def test_http_infer_without_the_header_is_403_in_tritons_words_and_wakes_nothing(
    up: UpProcess,
) -> None:
    conn = http.client.HTTPConnection(up.hostport, timeout=30)
    status, body = _infer(conn, {})
    assert (status, body) == (403, {"error": f"This API is restricted, expecting header '{KEY}'"})
    model = up.model("add_sub")
    assert model["replicas_desired"] == 0 and model["held_requests"] == 0  # nothing woken
    for path in ("/v2/repository/models/add_sub/load", "/thaw/models/add_sub/scale-to-zero"):
        conn.request("POST", path)  # both model-repository's
        response = conn.getresponse()
        assert (response.status, json.loads(response.read())["error"]) == (
            403, f"This API is restricted, expecting header '{KEY}'"
        ), path  # fmt: skip
    conn.close()
    client = httpclient.InferenceServerClient(up.hostport)
    assert client.is_server_live() and client.get_model_metadata("add_sub")  # open categories
    client.close()


def test_http_infer_with_the_header_is_served_and_a_warm_connection_is_not_handed_off(
    up: UpProcess,
) -> None:
    warm = http.client.HTTPConnection(up.hostport, timeout=60)
    status, body = _infer(warm, {KEY: SECRET})  # header names are case-insensitive
    assert status == 200 and body["outputs"][0]["data"] == [2, 3, 4, 5]
    warm.close()
    # A new connection to a warm model would be handed to its replica; the second request
    # on it, without the header, must still meet the activator's check.
    conn = http.client.HTTPConnection(up.hostport, timeout=30)
    assert _infer(conn, {KEY.upper(): SECRET})[0] == 200
    assert _infer(conn, {})[0] == 403
    assert _infer(conn, {KEY: "wrong"})[0] == 403
    conn.close()


def test_grpc_infer_needs_the_protocol_header_and_other_methods_stay_open(up: UpProcess) -> None:
    client = grpcclient.InferenceServerClient(up.grpc_address)
    try:
        assert client.is_server_live()
        tensors = [grpcclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
        for tensor in tensors:
            tensor.set_data_from_numpy(np.ones(4, dtype=np.float32))
        with pytest.raises(InferenceServerException) as info:
            client.infer("add_sub", tensors)
        assert info.value.status() == "StatusCode.UNAVAILABLE"
        assert (
            f"This protocol is restricted, expecting header 'triton-grpc-protocol-{KEY}'"
            in info.value.message()
        )
        result = client.infer("add_sub", tensors, headers={f"triton-grpc-protocol-{KEY}": SECRET})
        assert result.as_numpy("OUTPUT0").tolist() == [2, 2, 2, 2]
    finally:
        client.close()


def test_a_bad_restriction_is_refused_at_start_as_thaw_serve_refuses_it(tmp_path: Path) -> None:
    import subprocess
    import sys

    make_add_sub(tmp_path / "repo")
    words = "--http-restricted-api option format is '<config name>:<setting>=<value>'. Got nokey"
    for command in ("up", "serve"):
        done = subprocess.run(
            [sys.executable, "-m", "thaw.cli", command, str(tmp_path / "repo"),
             "--http-restricted-api", "nokey"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode != 0 and words in done.stderr, (command, done.stderr)
