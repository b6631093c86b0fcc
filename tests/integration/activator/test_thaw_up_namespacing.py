"""`thaw up --model-namespacing=true` over two real repositories, for real on loopback, models
at zero: a name both hold refused with Triton's words (HTTP 400, gRPC INVALID_ARGUMENT), a
name one holds served from zero, each repository's ensemble running its own repository's
step, an explicit load of the shared name, and the poll that makes a name unique again.

Repository `a` holds `twice` (add_sub on 4 floats) and the ensemble `ens_a` stepping into it;
`b` holds another `twice` (add_sub on 2 floats) and `ens_b`. A step that ran the other
repository's `twice` would fail on its shape, so a right answer says which model ran.
"""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.namespaced_repos import AMBIGUITY, make_namespaced_repos
from tests.fixtures.up_process import UpProcess

pytestmark = pytest.mark.integration

_QUIET = ("--warm-pool", "1", "--preload-frameworks", "", "--no-image-build")


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    a, b = make_namespaced_repos(tmp_path_factory.mktemp("ns"))
    server = UpProcess(
        a, f"--model-repository={b}", "--model-namespacing=true", "--grpc-port", "0",
        "--model-control-mode=explicit", "--load-model-at-zero=*", *_QUIET,
    )  # fmt: skip
    yield server
    server.stop()


def _run(
    client: httpclient.InferenceServerClient, model: str, size: int, *, tensors: str = "AB"
) -> list[float]:
    """The ensemble's SUM of A = 1..size and B = ones (`tensors="01"`: add_sub's own
    INPUT0/INPUT1, OUTPUT0/OUTPUT1)."""
    a = np.arange(1, size + 1, dtype=np.float32)
    ins = ("A", "B") if tensors == "AB" else ("INPUT0", "INPUT1")
    outs = ("SUM", "DIFF") if tensors == "AB" else ("OUTPUT0", "OUTPUT1")
    inputs = []
    for name, data in zip(ins, (a, np.ones(size, np.float32)), strict=True):
        tensor = httpclient.InferInput(name, [size], "FP32")
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    result = client.infer(model, inputs)
    assert result.as_numpy(outs[1]).tolist() == (a - 1).tolist()
    return list(result.as_numpy(outs[0]).tolist())


def _refused(call: Callable[[], object]) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        call()
    return caught.value


def _http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_name_both_repositories_hold_is_refused_with_tritons_words(up: UpProcess) -> None:
    with httpclient.InferenceServerClient(up.hostport) as client:
        assert AMBIGUITY in str(_refused(lambda: _run(client, "twice", 4)).message())
    assert _http_status(f"{up.url}/v2/models/twice") == 400
    tensors = [grpcclient.InferInput(f"INPUT{i}", [4], "FP32") for i in (0, 1)]
    for tensor in tensors:
        tensor.set_data_from_numpy(np.ones(4, np.float32))
    with grpcclient.InferenceServerClient(up.grpc_address) as client:
        for call in (lambda: client.get_model_metadata("twice"),
                     lambda: client.infer("twice", tensors)):  # fmt: skip
            refused = _refused(call)
            assert refused.status() == str(grpc.StatusCode.INVALID_ARGUMENT)
            assert AMBIGUITY in str(refused.message())


def test_a_name_one_repository_holds_is_served_from_zero(up: UpProcess) -> None:
    assert up.model("only_a")["replicas_ready"] == 0
    tensor = httpclient.InferInput("INPUT0", [3], "FP32")
    tensor.set_data_from_numpy(np.array([1, 2, 3], np.float32))
    with httpclient.InferenceServerClient(up.hostport) as client:
        result = client.infer("only_a", [tensor])
    assert result.as_numpy("OUTPUT0").tolist() == [1, 2, 3]


def test_each_ensemble_runs_its_own_repositorys_step(up: UpProcess) -> None:
    with httpclient.InferenceServerClient(up.hostport) as client:
        assert _run(client, "ens_a", 4) == [2, 3, 4, 5]
        assert _run(client, "ens_b", 2) == [2, 3]


def test_an_explicit_load_of_the_shared_name_is_taken(up: UpProcess) -> None:
    with httpclient.InferenceServerClient(up.hostport) as client:
        client.load_model("twice")  # held by both: a step of each ensemble, no endpoint
        rows = [r["name"] for r in client.get_model_repository_index()]
        assert rows.count("twice") == 2  # one row per namespace, as Triton lists them
        assert AMBIGUITY in str(_refused(lambda: _run(client, "twice", 4)).message())


def test_the_poll_makes_a_name_unique_again_and_the_ensembles_follow(tmp_path: Path) -> None:
    a, b = make_namespaced_repos(tmp_path)
    server = UpProcess(
        a, f"--model-repository={b}", "--model-namespacing=true",
        "--model-control-mode=poll", "--repository-poll-secs=1", *_QUIET,
    )  # fmt: skip
    try:
        with httpclient.InferenceServerClient(server.hostport) as client:
            assert _run(client, "ens_a", 4) == [2, 3, 4, 5]
            shutil.move(b / "twice", tmp_path / "twice")  # now only `a` holds it
            server.wait_for(lambda: _http_status(f"{server.url}/v2/models/twice") == 200, 30,
                            "'twice' to be served by name")  # fmt: skip
            assert _run(client, "twice", 4, tensors="01") == [2, 3, 4, 5]
            assert _run(client, "ens_a", 4) == [2, 3, 4, 5]
            shutil.move(tmp_path / "twice", b / "twice")  # both again: refused by name
            server.wait_for(lambda: _http_status(f"{server.url}/v2/models/twice") == 400, 30,
                            "'twice' to be ambiguous again")  # fmt: skip
            assert _run(client, "ens_b", 2) == [2, 3]
    finally:
        server.stop()
