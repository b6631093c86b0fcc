"""`thaw up s3://...`: the activator copies a repository from a real (moto) S3 bucket once and
its replicas serve that copy; a load reads the bucket again first, a poll picks up a model
added to it, and an S3 repository with `--scaler kubernetes` (whose pods cannot see the copy)
is refused at the start."""

from __future__ import annotations

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
from tests.fixtures.up_process import UpProcess, light_args

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


def _identity(client: httpclient.InferenceServerClient, name: str) -> list[float]:
    x = httpclient.InferInput("INPUT0", [3], "FP32")
    x.set_data_from_numpy(np.array([1, 2, 3], dtype=np.float32))
    return list(client.infer(name, [x]).as_numpy("OUTPUT0").tolist())


def test_explicit_loads_read_the_bucket_again(moto: str, local_repo: Path, tmp_path: Path) -> None:
    s3_repo = S3Repository(moto)
    s3_repo.upload(local_repo)
    mount = tmp_path / "mount"
    mount.mkdir()
    env = {**s3_repo.env(), "TRITON_AWS_MOUNT_DIRECTORY": str(mount)}
    args = ("--model-control-mode", "explicit", "--load-model", "add_sub")
    up = UpProcess(s3_repo.url, *light_args(tmp_path / "up"), *args, env=env)  # type: ignore[arg-type]
    try:
        with httpclient.InferenceServerClient(up.hostport) as client:
            a = np.arange(4, dtype=np.float32)
            inputs = [httpclient.InferInput(f"INPUT{i}", [4], "FP32") for i in (0, 1)]
            for tensor in inputs:
                tensor.set_data_from_numpy(a)
            assert client.infer("add_sub", inputs).as_numpy("OUTPUT0").tolist() == [0, 2, 4, 6]

            make_python_identity(local_repo, "ident")
            s3_repo.upload(local_repo, "ident")
            client.load_model("ident")  # not in the repository read at start: read again
            assert _identity(client, "ident") == [1, 2, 3]

            s3_repo.put("ident/1/model.py", DOUBLE_PY.encode())
            client.load_model("ident")  # changed: its replicas replaced by ones of the new files
            assert _identity(client, "ident") == [2, 4, 6]
    finally:
        assert up.stop() == 0, up.log()
    assert os.listdir(mount) == []  # the copy removed at exit


def test_poll_mode_serves_a_model_added_to_the_bucket(
    moto: str, local_repo: Path, tmp_path: Path
) -> None:
    s3_repo = S3Repository(moto)
    s3_repo.upload(local_repo)
    env = s3_repo.env(endpoint=True)
    args = ("--model-control-mode", "poll", "--repository-poll-secs", "0.5")
    up = UpProcess(s3_repo.plain_url, *light_args(tmp_path / "up"), *args, env=env)  # type: ignore[arg-type]
    try:
        make_python_identity(local_repo, "ident")
        s3_repo.upload(local_repo, "ident")
        with httpclient.InferenceServerClient(up.hostport) as client:
            deadline = time.monotonic() + 30
            while {"name": "ident", "version": "1", "state": "READY"} not in (
                client.get_model_repository_index()
            ):
                assert time.monotonic() < deadline, up.log()
                time.sleep(0.2)
            assert _identity(client, "ident") == [1, 2, 3]  # woken from zero
    finally:
        up.stop()


def test_a_load_after_the_endpoint_went_down_fails_clearly(
    local_repo: Path, tmp_path: Path
) -> None:
    with moto_server() as endpoint:  # its own S3 server: stopped while thaw up runs
        s3_repo = S3Repository(endpoint)
        s3_repo.upload(local_repo)
        args = ("--model-control-mode", "explicit")
        up = UpProcess(s3_repo.url, *light_args(tmp_path / "up"), *args, env=s3_repo.env())  # type: ignore[arg-type]
    try:
        with httpclient.InferenceServerClient(up.hostport) as client:
            started = time.monotonic()
            with pytest.raises(InferenceServerException) as caught:
                client.load_model("add_sub")
            assert time.monotonic() - started < 30  # bounded connects and retries
            assert caught.value.status() == "400"
            message = str(caught.value)
            assert "failed to load 'add_sub', failed to poll from model repository" in message
            assert "cannot reach the S3 endpoint" in message
    finally:
        up.stop()


def test_kubernetes_scaler_refuses_an_s3_repository() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "thaw.cli", "up", "s3://bucket/models", "--scaler", "kubernetes"],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ.copy(),
    )
    assert done.returncode == 2
    assert "an s3:// model repository needs --scaler local" in done.stderr
