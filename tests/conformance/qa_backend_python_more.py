"""More of Triton's qa/L0_backend_python subtests, as suites of tests.conformance.triton_qa (the
first ones: tests/conformance/qa_backend_python.py). Models:
tests/fixtures/triton_qa_backend_python_more.py.

    L0_backend_python/argument_validation
                                      ../test_infer_shm_leak.py under pytest, MODEL_NAME
                                      argument_validation (its model runs its own unittest of
                                      pb_utils' argument checks)
    L0_backend_python/async_execute   concurrency_test.py (it reads SERVER_LOG)
    L0_backend_python/restart         test.sh's two server starts, run by the suite itself:
                                      restart_test.py's test_infer; the server's child processes
                                      killed (SIGKILL); test_restart; the server stopped and
                                      /dev/shm's entries counted as before the start (a row);
                                      then a second start whose children are killed at once,
                                      and a row that the server still stops on SIGTERM, and
                                      /dev/shm's count again
    L0_backend_python/python_based_backends
                                      python_based_backends_test.py, explicit mode, the
                                      Python-based backend add_sub in `--backend-directory`
"""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

from tests.conformance.pytest_junit import run_pytest
from tests.conformance.qa_checkout import Result
from tests.conformance.qa_servers import Server, start
from tests.conformance.qa_suite import Run, Suite, SuiteRun
from tests.fixtures.triton_qa_backend_python_more import (
    build_add_sub_backend_dir,
    build_argument_validation_repo,
    build_async_execute_repo,
    build_python_based_backends_repo,
    build_restart_repo,
)

__all__ = ["MORE_BACKEND_PYTHON_SUITES", "children", "left_in_shm", "shm_entries"]

_VERBOSE = ("--log-verbose", "1")
_SHM = Path("/dev/shm")
# What restart_test.py's model writes in its working directory (test.sh removes it first).
_FREE_MEMORY = "free_memory.txt"
_TIER = re.compile(r"thaw-host-(\d+)-.*")  # activator.scaler.local.host_tier's directories


def shm_entries(shm: Path = _SHM) -> frozenset[str]:
    """What /dev/shm holds (restart/../common.sh's get_shm_pages counts it)."""
    return frozenset(entry.name for entry in shm.iterdir())


def left_in_shm(before: frozenset[str], after: frozenset[str], server_pid: int) -> list[str]:
    """get_shm_pages' check, made safe on a shared machine: the entries that appeared during
    the server's run and outlived it, less the host-memory tiers of other `thaw up` processes
    (`thaw-host-<pid>-…`, named for the `thaw up` that made it: /dev/shm is the machine's,
    and other sessions' servers come and go during the run)."""
    left = []
    for name in sorted(after - before):
        owner = _TIER.fullmatch(name)
        if owner is not None and int(owner.group(1)) != server_pid:
            continue
        left.append(name)
    return left


def children(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """`pgrep --parent PID`: the processes whose parent is `pid`."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # it exited meanwhile
            continue
        # `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(entry.name))
    return sorted(found)


def _kill_children(server: Server) -> list[str]:
    """test.sh's `for proc in $(pgrep --parent $SERVER_PID); do kill -9 $proc; done`; each
    killed process's pid and command line. Triton's children are its stubs, which is what the
    test means to kill: `thaw serve --front native`'s front (also a child) is left alone."""
    killed = []
    for child in children(server.proc.pid):
        try:
            argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
            if Path(argv[0].decode(errors="replace")).name == "thaw-front":
                continue
            os.kill(child, signal.SIGKILL)
        except (ProcessLookupError, FileNotFoundError):
            continue
        killed.append(f"{child} {b' '.join(argv[:6]).decode(errors='replace')}")
    return killed


def _run_restart(run: SuiteRun) -> list[Result]:
    """L0_backend_python/restart/test.sh: its two server starts and their rows."""
    results: list[Result] = []

    def row(file: str, test: str, outcome: str, detail: str = "") -> None:
        results.append(Result(run.label, file, test, outcome, " ".join(detail.split())[:600]))

    def pytest_one(test: str) -> None:
        (run.qa_dir / "restart_test.junit.xml").unlink(missing_ok=True)
        rows = run_pytest(run.qa_dir, f"restart_test.py::RestartTest::{test}", {})
        for test_id, got in rows.items():
            row("restart_test.py", test_id.rsplit(".", 1)[-1], got["outcome"], got["detail"])

    def shm_row(label: str, before: frozenset[str], server: Server) -> None:
        left = left_in_shm(before, shm_entries(), server.proc.pid)
        detail = f"left in /dev/shm: {', '.join(left)}" if left else ""
        row("test.sh", f"/dev/shm entries after {label}", "failed" if left else "passed", detail)

    # test.sh: `rm -fr *.log free_memory.txt` (the model writes it in the server's directory)
    for where in (Path.cwd(), run.qa_dir):
        (where / _FREE_MEMORY).unlink(missing_ok=True)
    first = ("test_infer", "test_restart", "/dev/shm entries after the first server")
    second = ("server stops after its children were killed", "/dev/shm entries after the second")

    before = shm_entries()
    server = _start(run)
    if isinstance(server, str):
        for test in first:
            row("test.sh", test, "error", server)
    else:
        try:
            pytest_one("test_infer")
            killed = _kill_children(server)
            print(f"restart: killed thaw {run.kind}'s children {killed}", file=sys.stderr)
            pytest_one("test_restart")
        finally:
            _stop(server, run.kind)
        shm_row("the first server", before, server)

    before = shm_entries()
    server = _start(run)
    if isinstance(server, str):
        for test in second:
            row("test.sh", test, "error", server)
    else:
        killed = _kill_children(server)
        rc = server.stop()  # test.sh's kill_server: SIGTERM, then wait
        # ServeProcess / UpProcess SIGKILL a server that outlives 30 s of SIGTERM
        outcome = "failed" if rc == -signal.SIGKILL else "passed"
        detail = f"killed {len(killed)} children; exit status {rc}"
        row("test.sh", second[0], outcome, "" if outcome == "passed" else detail)
        shm_row("the second", before, server)
    return results


def _start(run: SuiteRun) -> Server | str:
    """test.sh's run_server with its SERVER_ARGS, or why it did not become ready."""
    try:
        return start(run.kind, run.qa_dir / "models", _VERBOSE)
    except RuntimeError as exc:
        last = str(exc).strip().splitlines()[-1][:200]
        return f"thaw {run.kind} did not start: {last}"


def _stop(server: Server, kind: str) -> None:
    rc = server.stop()
    if rc != 0:
        print(f"warning: thaw {kind} exited {rc}; log: {server.log_path}", file=sys.stderr)


_BACKEND_DIR = ("--backend-directory", "{qa_dir}/backends")

MORE_BACKEND_PYTHON_SUITES = (
    Suite(
        "L0_backend_python/argument_validation",
        (),
        {"models": build_argument_validation_repo},
        (
            Run(
                "test_infer_shm_leak",
                "models",
                _VERBOSE,
                env=(("MODEL_NAME", "argument_validation"),),
                server_log="arg_validation_server.log",
                pytest=True,
            ),
        ),
        beside=("qa/L0_backend_python/test_infer_shm_leak.py",),
    ),
    Suite(
        "L0_backend_python/async_execute",
        ("concurrency_test.py",),
        {"models": build_async_execute_repo},
        (
            Run(
                "concurrency_test",
                "models",
                _VERBOSE,
                env=(("SERVER_LOG", "concurrency_test.server.log"),),
                server_log="concurrency_test.server.log",
            ),
        ),
    ),
    Suite(
        "L0_backend_python/restart",
        ("restart_test.py",),
        {"models": build_restart_repo},
        (),
        runner=_run_restart,
    ),
    Suite(
        "L0_backend_python/python_based_backends",
        ("python_based_backends_test.py",),
        {"models": build_python_based_backends_repo, "backends": build_add_sub_backend_dir},
        (
            Run(
                "python_based_backends_test",
                "models",
                (*_BACKEND_DIR, "--model-control-mode", "explicit", *_VERBOSE),
                server_log="python_based_backends_server.log",
            ),
        ),
    ),
)
