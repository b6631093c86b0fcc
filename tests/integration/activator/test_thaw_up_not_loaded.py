"""A replica that no longer has its model loaded, through a real `thaw up`: the model is
unloaded on its replica behind the activator's back (as a shared replica's eviction by the
scaling leader looks to another activator that has not heard yet), and the next request, over
HTTP and over gRPC, is answered all the same: the replica says so (thawwire.model_control
NOT_LOADED), leaves rotation, and the request goes to a new replica."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.fixtures.models import make_add_sub
from tests.fixtures.up_process import UpProcess, light_args, with_params

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    repo = tmp_path_factory.mktemp("not_loaded_repo")
    for name in ("over_http", "over_grpc"):
        with_params(make_add_sub(repo, name), max_replicas=1)
    server = UpProcess(
        repo,
        *light_args(repo),
    )  # fmt: skip
    assert server.grpc_address, server.log()
    yield server
    server.stop()


def _values() -> np.ndarray:
    return np.arange(4, dtype=np.float32)


def _infer(up: UpProcess, model: str, protocol: str) -> np.ndarray:
    """`model`'s OUTPUT0 for INPUT0 = INPUT1 = 0..3, over a new connection of `protocol`."""
    module: Any = httpclient if protocol == "http" else grpcclient
    address = up.hostport if protocol == "http" else up.grpc_address
    with module.InferenceServerClient(address) as client:
        inputs = [module.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(_values())
        result = client.infer(model, inputs)
    out = result.as_numpy("OUTPUT0")
    assert out is not None
    return out


def _unload_behind_the_activators_back(up: UpProcess, model: str) -> str:
    """Unload `model` on its one replica, straight at the replica (its pool runtime takes
    load/unload); the replica's id."""
    (replica,) = up.model(model)["replicas"]
    request = urllib.request.Request(
        f"{replica['url']}/v2/repository/models/{model}/unload", data=b"", method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        assert resp.status == 200
    return str(replica["id"])


@pytest.mark.parametrize(("model", "protocol"), [("over_http", "http"), ("over_grpc", "grpc")])
def test_a_request_to_a_replica_that_lost_its_model_goes_to_a_new_one(
    up: UpProcess, model: str, protocol: str
) -> None:
    expected = _values() + _values()
    np.testing.assert_array_equal(_infer(up, model, protocol), expected)  # woken: one replica
    lost = _unload_behind_the_activators_back(up, model)

    np.testing.assert_array_equal(_infer(up, model, protocol), expected)  # not a 503

    replicas = [r["id"] for r in up.model(model)["replicas"]]
    assert lost not in replicas, up.log()
    assert f"model={model} not" in up.log_path.read_text(errors="replace")
