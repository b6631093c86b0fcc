"""`thaw up --model-control-mode explicit`, for real on loopback, sees its repository change
after its start, as tritonserver and `thaw serve` do: a model directory added after the start
is served once loaded (HTTP and gRPC), a version directory added is served once loaded (the
replicas replaced), and a broken config is refused in thaw serve's words while the old
version keeps serving."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import VERSIONED_CONFIG, VERSIONED_PY, make_add_sub, python_model
from tests.fixtures.up_process import UpProcess, light_args

pytestmark = pytest.mark.integration


_X = np.arange(4, dtype=np.float32)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("repo")
    make_add_sub(repo, "first")
    return repo


@pytest.fixture(scope="module")
def up(repo: Path) -> Iterator[UpProcess]:
    server = UpProcess(repo, *light_args(repo), "--model-control-mode=explicit")
    yield server
    server.stop()


def _versioned(client: httpclient.InferenceServerClient) -> np.ndarray:
    inputs = [httpclient.InferInput("INPUT0", [4], "FP32")]
    inputs[0].set_data_from_numpy(_X)
    result = client.infer("versioned", inputs)
    answer: np.ndarray = result.as_numpy("OUTPUT0")
    return answer


def test_a_model_and_then_a_version_added_after_the_start_are_served_once_loaded(
    up: UpProcess, repo: Path
) -> None:
    with httpclient.InferenceServerClient(up.hostport, network_timeout=120.0) as client:
        names = {row["name"] for row in client.get_model_repository_index()}
        assert "versioned" not in names
        python_model(repo, "versioned", VERSIONED_CONFIG, VERSIONED_PY, version=1)
        client.load_model("versioned")
        assert client.is_model_ready("versioned")
        np.testing.assert_array_equal(_versioned(client), _X + 1)
        rows = [(r["name"], r.get("version")) for r in client.get_model_repository_index()]
        assert ("versioned", "1") in rows

        python_model(repo, "versioned", VERSIONED_CONFIG, VERSIONED_PY, version=2)
        client.load_model("versioned")
        np.testing.assert_array_equal(_versioned(client), _X + 2)  # the new version answers
        assert client.get_model_metadata("versioned")["versions"] == ["2"]

        # A broken config: refused as thaw serve refuses it; the old version keeps serving.
        (repo / "versioned" / "config.pbtxt").write_text('name: "versioned"\nmax_batch_size: -3\n')
        with pytest.raises(InferenceServerException, match="load failed for model 'versioned'"):
            client.load_model("versioned")
        np.testing.assert_array_equal(_versioned(client), _X + 2)
        assert client.get_model_metadata("versioned")["versions"] == ["2"]


def test_a_model_added_after_the_start_is_loaded_over_grpc(up: UpProcess, repo: Path) -> None:
    make_add_sub(repo, "late_grpc")
    x, y = np.arange(4, dtype=np.float32), np.ones(4, dtype=np.float32)
    inputs = [grpcclient.InferInput(f"INPUT{i}", [4], "FP32") for i in (0, 1)]
    inputs[0].set_data_from_numpy(x)
    inputs[1].set_data_from_numpy(y)
    with grpcclient.InferenceServerClient(up.grpc_address) as client:
        with pytest.raises(InferenceServerException, match="no such model"):
            client.load_model("not_there")
        client.load_model("late_grpc")
        assert client.is_model_ready("late_grpc", "1")
        assert not client.is_model_ready("late_grpc", "2")  # not served: not ready, as Triton
        result = client.infer("late_grpc", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x + y)


def test_poll_mode_serves_added_models_and_drops_removed_ones(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    repo = tmp_path_factory.mktemp("polled")
    make_add_sub(repo, "first")
    server = UpProcess(
        repo, *light_args(repo),
        "--model-control-mode=poll", "--repository-poll-secs=0.2",
    )  # fmt: skip
    try:
        with httpclient.InferenceServerClient(server.hostport, network_timeout=120.0) as client:

            def names() -> set[str]:
                return {row["name"] for row in client.get_model_repository_index()}

            python_model(repo, "versioned", VERSIONED_CONFIG, VERSIONED_PY, version=1)
            server.wait_for(lambda: "versioned" in names(), 30, "the poll to add the model")
            np.testing.assert_array_equal(_versioned(client), _X + 1)  # woken from zero
            python_model(repo, "versioned", VERSIONED_CONFIG, VERSIONED_PY, version=3)
            server.wait_for(
                lambda: client.get_model_metadata("versioned")["versions"] == ["3"],
                30,
                "the poll to see version 3",
            )
            np.testing.assert_array_equal(_versioned(client), _X + 3)
            for path in sorted((repo / "versioned").rglob("*"), reverse=True):
                path.unlink() if path.is_file() else path.rmdir()
            (repo / "versioned").rmdir()
            server.wait_for(lambda: "versioned" not in names(), 30, "the poll to drop the model")
            assert names() == {"first"}
    finally:
        server.stop()
