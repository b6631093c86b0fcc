"""`thaw serve` over a hostile model repository: configs that are not files, version
directories that are not versions. Each load is a clear JSON refusal or serves only the real
versions, answered at once; the other models keep serving.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fixtures.onnx_models import make_onnx_add
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

REQUEST_TIMEOUT_S = 60


def _post(url: str) -> tuple[int, dict[str, object]]:
    req = urllib.request.Request(url, data=b"", method="POST")
    try:
        with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as r:
            body = r.read()
            return r.status, json.loads(body) if body else {}
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _get(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=REQUEST_TIMEOUT_S) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


def _infer_ok(server: ServeProcess, model: str) -> bool:
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
                        "data": [1, 2, 3, 4]}]}  # fmt: skip
    req = urllib.request.Request(
        f"{server.url}/v2/models/{model}/infer", data=json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as r:
        return r.status == 200


def _config_fifo(path: Path) -> None:
    os.mkfifo(path)


def _config_dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _config_directory(path: Path) -> None:
    path.mkdir()


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    repo = tmp_path / "repo"
    make_onnx_add(repo, "good")
    for name, damage in (
        ("fifo_config", _config_fifo),
        ("dev_zero_config", _config_dev_zero),
        ("dir_config", _config_directory),
    ):
        make_onnx_add(repo, name)
        (repo / name / "config.pbtxt").unlink()
        damage(repo / name / "config.pbtxt")
    make_onnx_add(repo, "odd_versions")
    for odd in ("²", "99999999999999999999", "-1", "01"):
        shutil.copytree(repo / "odd_versions" / "1", repo / "odd_versions" / odd)
    with (repo / "odd_versions" / "config.pbtxt").open("a") as f:
        f.write("version_policy: { all { } }\n")
    yield repo


@pytest.mark.parametrize("name", ["fifo_config", "dev_zero_config", "dir_config"])
def test_a_config_that_is_not_a_regular_file_is_refused(
    repo: Path, start_serve: Callable[..., ServeProcess], name: str
) -> None:
    """Before: taken for a missing config, so the model loaded with an auto-completed one
    (its config.pbtxt silently ignored)."""
    server = start_serve(repo, "--model-control-mode", "explicit", "--load-model", "good")
    status, body = _post(f"{server.url}/v2/repository/models/{name}/load")
    assert status == 400, body
    assert "config.pbtxt: not a regular file" in str(body["error"])
    assert _infer_ok(server, "good")


def test_version_directories_that_are_no_versions_are_skipped(
    repo: Path, start_serve: Callable[..., ServeProcess]
) -> None:
    """Before: `²` failed the load with 500 (a ValueError); `99999999999999999999` was loaded
    (an instance started) as a version no request can name."""
    server = start_serve(repo, "--model-control-mode", "explicit")
    status, body = _post(f"{server.url}/v2/repository/models/odd_versions/load")
    assert status == 200, body
    assert _get(f"{server.url}/v2/models/odd_versions")["versions"] == ["1"]
    assert _infer_ok(server, "odd_versions")
    assert "Traceback" not in server.logs()
