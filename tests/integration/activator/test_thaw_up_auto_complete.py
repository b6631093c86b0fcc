"""A python model whose own `auto_complete_config` completes its config, through a real
`thaw up`: its config and metadata over HTTP and gRPC are the completed ones (the first asks a
replica, later ones, at zero replicas too, are answered from it without waking it); a hook
that raises gives the wake-up's error, as an infer does; other models are not woken."""

from __future__ import annotations

import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import make_add_sub, make_python_identity
from tests.fixtures.up_process import UpProcess, light_args, with_params

pytestmark = pytest.mark.integration

_HOOK = """
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        {body}
        return auto_complete_model_config
"""
_COMPLETES = """auto_complete_model_config.set_max_batch_size(8)
        auto_complete_model_config.add_input(
            {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]})
        auto_complete_model_config.add_output(
            {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]})"""
_RAISES = 'raise RuntimeError("hook says no")'


def _hooked(repo: Path, name: str, body: str) -> Path:
    """A python identity model with no tensors in its config.pbtxt: its hook adds them."""
    model = make_python_identity(repo, name)
    source = (model / "1" / "model.py").read_text()
    hook = textwrap.indent(textwrap.dedent(_HOOK.format(body=body)), "    ")
    (model / "1" / "model.py").write_text(
        source.replace("class TritonPythonModel:\n", "class TritonPythonModel:\n" + hook)
    )
    (model / "config.pbtxt").write_text('backend: "python"\n')
    return model


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    repo = tmp_path_factory.mktemp("auto_complete_repo")
    with_params(_hooked(repo, "hooked", _COMPLETES), scale_to_zero_grace_s=1, max_replicas=1)
    with_params(_hooked(repo, "hook_raises", _RAISES), activation_timeout_s=30)
    make_add_sub(repo, "plain")
    server = UpProcess(
        repo,
        *light_args(repo),
    )  # fmt: skip
    assert server.grpc_address, server.log()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(up: UpProcess) -> Iterator[grpcclient.InferenceServerClient]:
    c = grpcclient.InferenceServerClient(up.grpc_address)
    yield c
    c.close()


def _cold_starts(up: UpProcess, model: str) -> int:
    return sum(1 for c in up.get("/thaw/status")["cold_starts"] if c["model"] == model)


def _check_completed(config: dict[str, Any], metadata: dict[str, Any]) -> None:
    assert config["max_batch_size"] == 8, config
    assert [(t["name"], t["dims"]) for t in config["input"]] == [("INPUT0", [4])]
    assert [t["name"] for t in config["output"]] == ["OUTPUT0"]
    assert metadata["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]}]
    assert metadata["outputs"] == [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 4]}]


def _grpc(client: grpcclient.InferenceServerClient, model: str) -> tuple[Any, Any]:
    config = client.get_model_config(model, as_json=True)["config"]
    return config, client.get_model_metadata(model, as_json=True)


def test_config_and_metadata_are_the_hooks_at_zero_too(
    up: UpProcess, client: grpcclient.InferenceServerClient
) -> None:
    # The first answer (gRPC, at zero) wakes the model and asks its replica.
    assert up.model("hooked")["replicas_ready"] == 0
    config, metadata = _grpc(client, "hooked")
    assert config["max_batch_size"] == 8, config  # gRPC JSON: int64 dims as strings too
    assert [i["dims"] for i in config["input"]] == [["4"]]
    assert metadata["inputs"][0]["shape"] == ["-1", "4"]
    assert _cold_starts(up, "hooked") == 1
    up.wait_for(lambda: up.model("hooked")["replicas_ready"] == 0, 60, "hooked back at zero")
    # At zero again: every surface answers from what the replica said, without a wake-up.
    for path in ("/v2/models/hooked", "/v2/models/hooked/versions/1"):
        _check_completed(up.get(path + "/config"), up.get(path))
    config, metadata = _grpc(client, "hooked")
    assert config["max_batch_size"] == 8 and metadata["inputs"][0]["shape"] == ["-1", "4"]
    assert _cold_starts(up, "hooked") == 1
    assert up.model("hooked")["replicas_ready"] == 0
    assert client.is_model_ready("hooked")
    # Other models are answered from the repository, never woken.
    assert up.get("/v2/models/plain/config")["name"] == "plain"
    assert _cold_starts(up, "plain") == 0


def _http_error(up: UpProcess, path: str, data: bytes | None = None) -> tuple[int, str]:
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(urllib.request.Request(up.url + path, data=data), timeout=60)
    return info.value.code, info.value.read().decode()


def test_a_hook_that_raises_fails_as_an_infer_does(
    up: UpProcess, client: grpcclient.InferenceServerClient
) -> None:
    status, body = _http_error(up, "/v2/models/hook_raises/config")
    assert status == 503 and "hook says no" in body, body
    infer = b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","data":[1]}]}'
    assert _http_error(up, "/v2/models/hook_raises/infer", infer)[0] == 503
    with pytest.raises(InferenceServerException) as info:
        client.get_model_metadata("hook_raises")
    assert info.value.status() == "StatusCode.UNAVAILABLE"
    assert "hook says no" in str(info.value.message())
    assert up.get("/v2/models/hooked/config")["max_batch_size"] == 8  # unaffected
