"""tritonserver's `--model-config-name` on `thaw serve` and `thaw up`, as Triton's
qa/L0_custom_model_config checks it: a model's `configs/NAME.pbtxt` is served where it has one
(its version policy tells which config was read), `config.pbtxt` where it has not, and an empty
name is refused at start."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.models import make_add_sub
from tests.fixtures.serve_process import ServeProcess
from tests.fixtures.up_process import UpProcess, light_args

pytestmark = pytest.mark.integration

_POLICIES = {"config.pbtxt": "1, 3", "configs/h100.pbtxt": "1", "configs/config.pbtxt": "3"}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("custom_config")
    model = make_add_sub(root / "models", "add_sub")
    for version in ("1", "2", "3"):
        (model / version).mkdir(exist_ok=True)
        (model / version / "model.py").write_text((model / "1" / "model.py").read_text())
    base = (model / "config.pbtxt").read_text()
    (model / "configs").mkdir()
    for path, versions in _POLICIES.items():
        policy = f"version_policy: {{ specific: {{ versions: [{versions}] }} }}\n"
        (model / path).write_text(base + policy)
    return root / "models"


def _versions(url: str) -> list[str]:
    with urllib.request.urlopen(f"{url}/v2/models/add_sub/config", timeout=30) as answer:
        config = json.loads(answer.read())
    return [str(v) for v in config["version_policy"]["specific"]["versions"]]


@pytest.mark.parametrize(
    ("flags", "versions"),
    [((), ["1", "3"]), (("--model-config-name=h100",), ["1"]),
     (("--model-config-name=config",), ["3"]), (("--model-config-name=h200",), ["1", "3"])],
)  # fmt: skip
def test_thaw_serve_reads_the_named_config(
    start_serve: Callable[..., ServeProcess], repo: Path, flags: tuple[str, ...],
    versions: list[str],
) -> None:  # fmt: skip
    server = start_serve(repo, *flags)
    assert _versions(server.url) == versions


def test_thaw_up_and_its_replicas_read_the_named_config(repo: Path, tmp_path: Path) -> None:
    up = UpProcess(repo, *light_args(tmp_path / "repo"), "--model-config-name", "h100")
    try:
        assert _versions(up.url) == ["1"]  # answered at zero, from the repository
        with urllib.request.urlopen(
            urllib.request.Request(
                f"{up.url}/v2/models/add_sub/infer",
                data=json.dumps({"inputs": [
                    {"name": n, "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}
                    for n in ("INPUT0", "INPUT1")]}).encode(),
            ),
            timeout=120,
        ) as answer:  # fmt: skip
            assert json.loads(answer.read())["model_version"] == "1"
        (row,) = up.get("/v2/models/add_sub/stats")["model_stats"]
        assert row["version"] == "1"
    finally:
        up.stop()


@pytest.mark.parametrize("command", ["serve", "up"])
def test_an_empty_name_is_refused_at_start(command: str, repo: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "thaw.cli", command, str(repo), "--port", "0",
         "--model-config-name="],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "Error: empty argument for --model-config-name" in done.stderr
