"""`thaw up --model-control-mode explicit`, for real on loopback, updates a model's instances in
place on a load that changes only its config's `instance_group`, as tritonserver and `thaw
serve` do: the running replica stays (same process), only the added instances `initialize` and
only the removed ones `finalize`; a config change beyond `instance_group` still replaces the
replica (a new process, every instance initialized again)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.fixtures.models import ECHO_EXECUTE, python_model
from tests.fixtures.up_process import UpProcess, light_args

pytestmark = pytest.mark.integration


# Counts its `initialize` and `finalize` calls, a line each, in files beside the repository
# (not in it: a file written into the model's directory would be a change of its files).
_COUNTED_PY = (
    """
from pathlib import Path

import triton_python_backend_utils as pb_utils


def _note(args, kind):
    log = Path(args["model_repository"]).parent.parent / f"counted.{kind}"
    with log.open("a") as f:
        f.write(args["model_instance_name"] + "\\n")


class TritonPythonModel:
    def finalize(self):
        _note(self.args, "finalize")

    def initialize(self, args):
        self.args = args
        _note(args, "initialize")
"""
    + ECHO_EXECUTE
)
_CONFIG = (
    'name: "counted"\nbackend: "python"\n'
    'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
)
_X = np.arange(4, dtype=np.float32)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("instance_update") / "repo"
    repo.mkdir()
    python_model(repo, "counted", _CONFIG, _COUNTED_PY)
    _instances(repo, 1)
    return repo


@pytest.fixture(scope="module")
def up(repo: Path) -> Iterator[UpProcess]:
    server = UpProcess(repo, *light_args(repo), "--model-control-mode=explicit")
    yield server
    server.stop()


def _instances(repo: Path, count: int, extra: str = "") -> None:
    """`counted` with `count` CPU instances; its mtime moved on (a change, whatever its size)."""
    path = repo / "counted" / "config.pbtxt"
    before = path.stat().st_mtime_ns
    path.write_text(_CONFIG + f"instance_group [ {{ count: {count} kind: KIND_CPU }} ]\n" + extra)
    os.utime(path, ns=(before + 10**9, before + 10**9))


def _count(repo: Path, kind: str) -> int:
    log = repo.parent / f"counted.{kind}"
    return len(log.read_text().splitlines()) if log.exists() else 0


def _pids(up: UpProcess) -> list[int]:
    return [r["pid"] for r in up.model("counted")["replicas"]]


def _infer(client: httpclient.InferenceServerClient) -> None:
    inputs = [httpclient.InferInput("INPUT0", [4], "FP32")]
    inputs[0].set_data_from_numpy(_X)
    np.testing.assert_array_equal(client.infer("counted", inputs).as_numpy("OUTPUT0"), _X)


def test_an_instance_group_change_updates_the_running_replica_in_place(
    up: UpProcess, repo: Path
) -> None:
    with httpclient.InferenceServerClient(up.hostport, network_timeout=120.0) as client:
        client.load_model("counted")
        _infer(client)
        [pid] = _pids(up)
        assert (_count(repo, "initialize"), _count(repo, "finalize")) == (1, 0)

        _instances(repo, 3)  # two instances added
        client.load_model("counted")
        assert (_count(repo, "initialize"), _count(repo, "finalize")) == (3, 0)
        assert _pids(up) == [pid]  # the same replica, its first instance never re-initialized
        assert client.get_model_config("counted")["instance_group"][0]["count"] == 3
        _infer(client)

        _instances(repo, 2)  # one removed: finalized before the load returns
        client.load_model("counted")
        assert (_count(repo, "initialize"), _count(repo, "finalize")) == (3, 1)
        assert _pids(up) == [pid]
        _infer(client)

        _instances(repo, 2)  # rewritten the same (Triton's count 0 read as 1 too): kept as is
        client.load_model("counted")
        assert (_count(repo, "initialize"), _count(repo, "finalize"), _pids(up)) == (3, 1, [pid])

        # Beyond instance_group (a parameter): the replica is replaced, every instance anew.
        _instances(repo, 2, 'parameters { key: "note" value { string_value: "x" } }\n')
        client.load_model("counted")
        _infer(client)
        up.wait_for(lambda: _count(repo, "finalize") == 3, 30, "the old replica's finalize")
        assert _count(repo, "initialize") == 5
        assert _pids(up) != [pid]
