"""`thaw serve s3://...` against an S3 endpoint that checks credentials (a moto server with
IAM signatures on), as tritonserver's qa/L0_storage_S3 gives them: AWS_* variables, ~/.aws
alone, the variables winning over other keys in ~/.aws, a temporary key with its session
token; and a wrong secret refuses the start in words that name the credentials, never the
secret."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.fixtures.models import make_add_sub
from tests.fixtures.moto_s3 import REGION, Keys, aws_client, moto_server_with_auth
from tests.fixtures.serve_process import serving

pytestmark = pytest.mark.integration

BUCKET = "thaw-credentials"
_LIGHT = ("--allow-grpc=false", "--allow-metrics=false")


@pytest.fixture(scope="module")
def authed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Keys, Keys]]:
    """(endpoint, keys, temporary keys) of a moto server that checks signatures, holding an
    add_sub repository at the root of BUCKET."""
    with moto_server_with_auth() as (url, keys, temporary):
        s3 = aws_client("s3", url, keys)
        s3.create_bucket(Bucket=BUCKET)
        repo = tmp_path_factory.mktemp("credentials") / "models"
        make_add_sub(repo)
        for path in sorted(repo.rglob("*")):
            if path.is_file():
                key = path.relative_to(repo).as_posix()
                s3.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())
        yield url, keys, temporary


@pytest.fixture(autouse=True)
def no_aws_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each test gives its credentials itself: none from the environment, HOME a new one."""
    for name in list(os.environ):
        if name.startswith("AWS_") or name == "TRITON_CLOUD_CREDENTIAL_PATH":
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def _variables(keys: Keys, endpoint: str) -> dict[str, str]:
    env = {"AWS_ACCESS_KEY_ID": keys.key_id, "AWS_SECRET_ACCESS_KEY": keys.secret,
           "AWS_DEFAULT_REGION": REGION, "AWS_ENDPOINT_URL_S3": endpoint}  # fmt: skip
    if keys.token:
        env["AWS_SESSION_TOKEN"] = keys.token
    return env


def _aws_files(home: Path, keys: Keys, region: str = REGION) -> None:
    """What `aws configure set` writes."""
    (home / ".aws").mkdir(parents=True)
    token = f"aws_session_token = {keys.token}\n" if keys.token else ""
    (home / ".aws" / "credentials").write_text(
        f"[default]\naws_access_key_id = {keys.key_id}\n"
        f"aws_secret_access_key = {keys.secret}\n{token}"
    )
    (home / ".aws" / "config").write_text(f"[default]\nregion = {region}\n")


def _serves(env: dict[str, str], tmp_path: Path) -> None:
    mount = tmp_path / "mount"
    mount.mkdir()
    env = {**env, "TRITON_AWS_MOUNT_DIRECTORY": str(mount)}
    a = np.arange(4, dtype=np.float32)
    inputs = [httpclient.InferInput(f"INPUT{i}", [4], "FP32") for i in (0, 1)]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    with serving(f"s3://{BUCKET}", *_LIGHT, env=env) as server:
        out = httpclient.InferenceServerClient(server.hostport).infer("add_sub", inputs)
    np.testing.assert_array_equal(out.as_numpy("OUTPUT0"), a + a)


def test_aws_variables_alone(authed: tuple[str, Keys, Keys], tmp_path: Path) -> None:
    url, keys, _ = authed
    _serves(_variables(keys, url), tmp_path)


def test_aws_files_alone(authed: tuple[str, Keys, Keys], tmp_path: Path) -> None:
    url, keys, _ = authed
    _aws_files(Path(os.environ["HOME"]), keys)
    _serves({"AWS_ENDPOINT_URL_S3": url}, tmp_path)


def test_the_variables_win_over_other_keys_in_aws_files(
    authed: tuple[str, Keys, Keys], tmp_path: Path
) -> None:
    url, keys, _ = authed
    _aws_files(Path(os.environ["HOME"]), Keys("dummy_id", "dummy_key"), region="dummy_region")
    _serves(_variables(keys, url), tmp_path)


def test_temporary_keys_with_their_session_token(
    authed: tuple[str, Keys, Keys], tmp_path: Path
) -> None:
    url, _, temporary = authed
    _serves(_variables(temporary, url), tmp_path)


def test_a_wrong_secret_refuses_the_start_naming_the_credentials(
    authed: tuple[str, Keys, Keys], tmp_path: Path
) -> None:
    url, keys, temporary = authed
    mount = tmp_path / "mount"
    mount.mkdir()
    wrong = [Keys(keys.key_id, "[Invalid]"), Keys(temporary.key_id, temporary.secret)]
    for key in wrong:  # a wrong secret; a temporary key without its token
        env = {**os.environ, **_variables(key, url), "TRITON_AWS_MOUNT_DIRECTORY": str(mount)}
        done = subprocess.run(
            [sys.executable, "-m", "thaw.cli", "serve", f"s3://{BUCKET}", "--port", "0", *_LIGHT],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 1, done.stderr[-2000:]
        assert f"model repository s3://{BUCKET}" in done.stderr
        assert "check the credentials" in done.stderr, done.stderr[-2000:]
        assert key.secret not in done.stderr
        assert os.listdir(mount) == []
