"""tests.conformance.qa_backend_python_more's pure parts: the restart subtest's process and
/dev/shm checks, and how the four subtests start their servers."""

from __future__ import annotations

from pathlib import Path

from tests.conformance.qa_backend_python_more import children, left_in_shm
from tests.conformance.triton_qa import SUITES


def _proc(root: Path, pid: int, comm: str, ppid: int) -> None:
    (root / str(pid)).mkdir()
    (root / str(pid) / "stat").write_text(f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1\n")


def test_children_are_the_processes_whose_parent_is_the_server(tmp_path: Path) -> None:
    _proc(tmp_path, 10, "python", 1)
    _proc(tmp_path, 11, "stub (a) 2", 10)  # a command name with spaces and parentheses
    _proc(tmp_path, 12, "python", 10)
    _proc(tmp_path, 13, "python", 11)  # a grandchild: not killed by test.sh
    (tmp_path / "self").mkdir()
    assert children(10, tmp_path) == [11, 12]


def test_what_a_server_left_in_dev_shm_is_named_other_thaw_ups_tiers_aside() -> None:
    before = frozenset({"libpod_lock", "thaw-host-7-aaa"})
    after = before | {"thaw-host-8-bbb", "thaw-host-99-ccc", "triton_python_backend_shm_region_1"}
    assert left_in_shm(before, after, server_pid=99) == [
        "thaw-host-99-ccc",
        "triton_python_backend_shm_region_1",
    ]
    assert left_in_shm(before, before - {"thaw-host-7-aaa"}, server_pid=99) == []


def test_the_four_subtests_start_as_their_test_sh_starts_tritonserver() -> None:
    based = SUITES["L0_backend_python/python_based_backends"]
    (run,) = based.runs
    assert "--backend-directory" in run.serve_args and "explicit" in run.serve_args
    assert set(based.repos) == {"models", "backends"}
    (run,) = SUITES["L0_backend_python/async_execute"].runs
    assert dict(run.env)["SERVER_LOG"] == run.server_log == "concurrency_test.server.log"
    (run,) = SUITES["L0_backend_python/argument_validation"].runs
    assert run.pytest and dict(run.env)["MODEL_NAME"] == "argument_validation"
    assert SUITES["L0_backend_python/restart"].runner is not None
