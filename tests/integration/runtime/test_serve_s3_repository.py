"""`thaw serve s3://...`: a Triton model repository in a real (moto) S3 bucket, in each model
control mode, as tritonserver serves one (its qa/L0_storage_S3_local): inference through
`tritonclient.http`, the index, load and unload after the bucket changed, and the faults an
operator meets (no bucket, the endpoint down at the start or later) in clear words. Nothing
of the local copy is left after the server stops."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import IDENTITY_PY, make_add_sub, make_python_identity
from tests.fixtures.moto_s3 import moto_server
from tests.fixtures.s3_repository import S3Repository
from tests.fixtures.serve_process import serving

pytestmark = pytest.mark.integration

DOUBLE_PY = IDENTITY_PY.replace("tensor.as_numpy()", "tensor.as_numpy() * 2")


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    with moto_server() as url:
        yield url


@pytest.fixture
def local_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "local"
    make_add_sub(repo)
    return repo


@pytest.fixture
def s3_repo(moto: str, local_repo: Path) -> S3Repository:
    repository = S3Repository(moto)
    repository.upload(local_repo)
    return repository


@pytest.fixture
def mount(tmp_path: Path) -> Path:
    """tritonserver's TRITON_AWS_MOUNT_DIRECTORY: where the server makes its copy."""
    directory = tmp_path / "mount"
    directory.mkdir()
    return directory


def _add_sub(client: httpclient.InferenceServerClient) -> np.ndarray:
    a = np.arange(4, dtype=np.float32)
    inputs = [httpclient.InferInput(f"INPUT{i}", [4], "FP32") for i in (0, 1)]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    return client.infer("add_sub", inputs).as_numpy("OUTPUT0")


def _identity(client: httpclient.InferenceServerClient, name: str) -> np.ndarray:
    x = httpclient.InferInput("INPUT0", [3], "FP32")
    x.set_data_from_numpy(np.array([1, 2, 3], dtype=np.float32))
    return client.infer(name, [x]).as_numpy("OUTPUT0")


def test_a_repository_at_the_urls_own_endpoint_is_served(
    s3_repo: S3Repository, mount: Path
) -> None:
    env = {**s3_repo.env(), "TRITON_AWS_MOUNT_DIRECTORY": str(mount)}
    with serving(s3_repo.url, env=env) as server:  # type: ignore[arg-type]
        with httpclient.InferenceServerClient(server.hostport) as client:
            assert _add_sub(client).tolist() == [0, 2, 4, 6]
            index = client.get_model_repository_index()
            assert index == [{"name": "add_sub", "version": "1", "state": "READY"}]
        assert len(os.listdir(mount)) == 1  # the copy is under the mount directory
    assert os.listdir(mount) == []  # and removed at exit


def test_explicit_load_and_unload_follow_the_bucket(
    s3_repo: S3Repository, local_repo: Path, mount: Path
) -> None:
    env = {**s3_repo.env(endpoint=True), "TRITON_AWS_MOUNT_DIRECTORY": str(mount)}
    args = ("--model-control-mode", "explicit", "--load-model", "add_sub")
    with (
        serving(s3_repo.plain_url, *args, env=env) as server,  # type: ignore[arg-type]
        httpclient.InferenceServerClient(server.hostport) as client,
    ):
        assert _add_sub(client).tolist() == [0, 2, 4, 6]
        make_python_identity(local_repo, "ident")
        s3_repo.upload(local_repo, "ident")
        # The index reads the bucket again, as tritonserver's does.
        assert {"name": "ident"} in client.get_model_repository_index()
        client.load_model("ident")
        assert _identity(client, "ident").tolist() == [1, 2, 3]

        s3_repo.put("ident/1/model.py", DOUBLE_PY.encode())  # the model changed in the bucket
        client.load_model("ident")
        assert _identity(client, "ident").tolist() == [2, 4, 6]

        client.unload_model("ident")
        assert not client.is_model_ready("ident")
        s3_repo.delete_model("ident")  # gone from the bucket: gone from the repository
        refused = "failed to poll from model repository: no such model"  # Triton's, then ours
        with pytest.raises(InferenceServerException, match=refused) as caught:
            client.load_model("ident")
        assert caught.value.status() == "404"
        assert _add_sub(client).tolist() == [0, 2, 4, 6]  # the others unaffected


def test_a_bucket_root_on_localhost_with_every_allowed_character(
    moto: str, tmp_path: Path, mount: Path
) -> None:
    """qa/L0_storage_S3_local's first case: `s3://localhost:PORT/demo-bucket1.0` (the bucket's
    root, a name with a dot), explicit mode, and a model named with every allowed character."""
    local = tmp_path / "qa"
    make_add_sub(local, "Model_repo-1.0")
    make_add_sub(local)
    s3_repo = S3Repository(moto, prefix="", bucket="demo-bucket1.0")
    s3_repo.upload(local)
    url = s3_repo.url.replace("127.0.0.1", "localhost")
    assert url.endswith("/demo-bucket1.0")
    env = {**s3_repo.env(), "TRITON_AWS_MOUNT_DIRECTORY": str(mount)}
    with (
        serving(url, "--model-control-mode=explicit", env=env) as server,  # type: ignore[arg-type]
        httpclient.InferenceServerClient(server.hostport) as client,
    ):
        for name in ("Model_repo-1.0", "add_sub"):
            client.load_model(name)
            assert client.is_model_ready(name)
        assert _add_sub(client).tolist() == [0, 2, 4, 6]


def test_several_s3_repositories_serve_as_one_index(moto: str, tmp_path: Path, mount: Path) -> None:
    """qa/L0_storage_S3_local's multiple-repository case: two buckets, explicit loads."""
    repos = []
    for name in ("add_sub", "ident"):
        local = tmp_path / name
        if name == "add_sub":
            make_add_sub(local)
        else:
            make_python_identity(local, name)
        repo = S3Repository(moto, prefix="")
        repo.upload(local)
        repos.append(repo)
    env = {**repos[0].env(), "TRITON_AWS_MOUNT_DIRECTORY": str(mount)}
    args = (f"--model-repository={repos[1].url}", "--model-control-mode=explicit")
    with (
        serving(repos[0].url, *args, env=env) as server,  # type: ignore[arg-type]
        httpclient.InferenceServerClient(server.hostport) as client,
    ):
        client.load_model("add_sub")
        client.load_model("ident")
        assert _add_sub(client).tolist() == [0, 2, 4, 6]
        assert _identity(client, "ident").tolist() == [1, 2, 3]
        assert len(os.listdir(mount)) == 2  # a copy each
    assert os.listdir(mount) == []


def test_poll_mode_serves_a_model_added_to_the_bucket(
    s3_repo: S3Repository, local_repo: Path, mount: Path
) -> None:
    env = {**s3_repo.env(), "TRITON_AWS_MOUNT_DIRECTORY": str(mount)}
    args = ("--model-control-mode", "poll", "--repository-poll-secs", "0.5")
    with (
        serving(s3_repo.url, *args, env=env) as server,  # type: ignore[arg-type]
        httpclient.InferenceServerClient(server.hostport) as client,
    ):
        make_python_identity(local_repo, "ident")
        s3_repo.upload(local_repo, "ident")
        deadline = time.monotonic() + 30
        while not client.is_model_ready("ident"):
            assert time.monotonic() < deadline, server.logs()
            time.sleep(0.2)
        assert _identity(client, "ident").tolist() == [1, 2, 3]

        # qa/L0_storage_S3_local's poll case: a new version replaces the served one.
        s3_repo.put("add_sub/2/model.py", (local_repo / "add_sub/1/model.py").read_bytes())
        expected = [
            {"name": "add_sub", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"},
            {"name": "add_sub", "version": "2", "state": "READY"},
        ]
        while not all(row in client.get_model_repository_index() for row in expected):
            assert time.monotonic() < deadline, server.logs()
            time.sleep(0.2)
        assert client.is_model_ready("add_sub", "2") and _add_sub(client).tolist() == [0, 2, 4, 6]


def test_a_load_after_the_endpoint_went_down_fails_clearly(local_repo: Path, mount: Path) -> None:
    with contextlib.ExitStack() as running:
        with moto_server() as endpoint:  # its own S3 server: stopped while thaw serve runs
            s3_repo = S3Repository(endpoint)
            s3_repo.upload(local_repo)
            env = {**s3_repo.env(), "TRITON_AWS_MOUNT_DIRECTORY": str(mount)}
            args = ("--model-control-mode", "explicit")
            server = running.enter_context(serving(s3_repo.url, *args, env=env))  # type: ignore[arg-type]
        client = running.enter_context(httpclient.InferenceServerClient(server.hostport))
        started = time.monotonic()
        with pytest.raises(InferenceServerException) as caught:
            client.load_model("add_sub")
        assert time.monotonic() - started < 30  # bounded connects and retries
        message = str(caught.value)
        assert "failed to load 'add_sub', failed to poll from model repository" in message
        assert "cannot reach the S3 endpoint" in message
        # The index answers from the copy as last read.
        assert client.get_model_repository_index() == [{"name": "add_sub"}]
    assert os.listdir(mount) == []


def _serve_refused(url: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "thaw.cli", "serve", url, "--port", "0", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_start_is_refused_clearly_without_a_bucket_or_an_endpoint(
    s3_repo: S3Repository, mount: Path
) -> None:
    env = {**s3_repo.env(), "TRITON_AWS_MOUNT_DIRECTORY": str(mount)}
    missing = s3_repo.url.replace(s3_repo.bucket, "no-such-bucket")
    done = _serve_refused(missing, env)
    assert done.returncode == 1
    assert "bucket 'no-such-bucket' does not exist" in done.stderr

    empty = s3_repo.url + "/nothing-here"
    done = _serve_refused(empty, env)
    assert done.returncode == 1 and "no objects under it" in done.stderr

    down = "s3://127.0.0.1:1/bucket/models"
    started = time.monotonic()
    done = _serve_refused(down, env)
    assert done.returncode == 1 and "cannot reach the S3 endpoint" in done.stderr
    assert time.monotonic() - started < 30

    # A refused flag is said before anything is downloaded.
    done = _serve_refused(s3_repo.url, env, "--repository-poll-secs", "0")
    assert done.returncode == 2 and "--repository-poll-secs" in done.stderr
    assert os.listdir(mount) == []
