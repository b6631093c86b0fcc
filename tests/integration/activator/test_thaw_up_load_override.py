"""`thaw up --model-control-mode explicit`, for real on loopback, loads a model with Triton's
load overrides, as tritonserver and `thaw serve` do, over HTTP and gRPC: a `config` override of
a model at zero serves the versions it asks for, a plain load keeps it while the files are
unchanged, `config` with `file:` model files serves exactly those files (replicas replaced),
a bad override is refused 400 in Triton's words while the old model keeps serving, and an
unload then a plain load serves the repository's files again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import VERSIONED_CONFIG, VERSIONED_PY, python_model
from tests.fixtures.up_process import UpProcess, light_args

pytestmark = pytest.mark.integration


_CONFIG_JSON = {
    "backend": "python",
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
    "instance_group": [{"count": 1, "kind": "KIND_CPU"}],
}

_X = np.arange(4, dtype=np.float32)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("repo")
    for version in (1, 3):  # the latest policy serves 3
        python_model(repo, "versioned", VERSIONED_CONFIG, VERSIONED_PY, version=version)
    return repo


@pytest.fixture(scope="module")
def up(repo: Path) -> Iterator[UpProcess]:
    server = UpProcess(repo, *light_args(repo), "--model-control-mode=explicit")
    yield server
    server.stop()


def _answer(client: httpclient.InferenceServerClient | grpcclient.InferenceServerClient) -> float:
    """The version that answered (OUTPUT0 - INPUT0)."""
    module = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    inputs = [module.InferInput("INPUT0", [4], "FP32")]
    inputs[0].set_data_from_numpy(_X)
    result = client.infer("versioned", inputs)
    return float((result.as_numpy("OUTPUT0") - _X)[0])


def test_overrides_over_http(up: UpProcess) -> None:
    with httpclient.InferenceServerClient(up.hostport, network_timeout=120.0) as client:
        # At zero: the override's config is served from the first wake.
        policy = {**_CONFIG_JSON, "version_policy": {"specific": {"versions": [1]}}}
        client.load_model("versioned", config=json.dumps(policy))
        assert client.is_model_ready("versioned", "1")
        assert not client.is_model_ready("versioned", "3")
        assert _answer(client) == 1.0
        client.load_model("versioned")  # no config: the override holds
        assert client.get_model_metadata("versioned")["versions"] == ["1"]
        assert _answer(client) == 1.0

        # config + files: the model's directory is exactly the files.
        client.load_model(
            "versioned",
            config=json.dumps(_CONFIG_JSON),
            files={"file:7/model.py": VERSIONED_PY.encode()},
        )
        assert client.get_model_metadata("versioned")["versions"] == ["7"]
        assert _answer(client) == 7.0

        # Refused in Triton's words; the override serving keeps serving.
        with pytest.raises(InferenceServerException, match="failed to load 'versioned'"):
            client.load_model(
                "versioned",
                config=json.dumps(_CONFIG_JSON),
                files={"file:../../escape/model.py": b"x"},
            )
        with pytest.raises(InferenceServerException, match="failed to load 'versioned'"):
            client.load_model("versioned", files={"file:1/model.py": b"x"})  # no config
        with pytest.raises(InferenceServerException, match="load failed for model 'versioned'"):
            refused = {**_CONFIG_JSON, "max_batch_size": -3}
            client.load_model("versioned", config=json.dumps(refused))
        assert _answer(client) == 7.0

        # Unloaded, then a plain load: the repository's files again.
        client.unload_model("versioned")
        client.load_model("versioned")
        assert client.get_model_metadata("versioned")["versions"] == ["3"]
        assert _answer(client) == 3.0


def test_overrides_over_grpc(up: UpProcess) -> None:
    with grpcclient.InferenceServerClient(up.grpc_address) as client:
        client.load_model(
            "versioned_copy",  # a name no repository has, from its files alone
            config=json.dumps(_CONFIG_JSON),
            files={"file:5/model.py": VERSIONED_PY.encode()},
        )
        assert client.is_model_ready("versioned_copy", "5")
        client.load_model(
            "versioned",
            config=json.dumps(_CONFIG_JSON),
            files={"file:4/model.py": VERSIONED_PY.encode()},
        )
        assert client.is_model_ready("versioned", "4")
        assert not client.is_model_ready("versioned", "3")
        assert _answer(client) == 4.0
        with pytest.raises(InferenceServerException, match="is not valid JSON"):
            client.load_model("versioned", config="{not json")
        assert _answer(client) == 4.0
        client.unload_model("versioned")
        client.load_model("versioned")
        assert _answer(client) == 3.0
