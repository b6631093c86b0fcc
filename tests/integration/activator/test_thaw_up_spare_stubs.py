"""`thaw up`'s pool processes start a Python stub while they wait to be claimed
(`--python-spare-stubs`, default 1): a Python model's cold start takes it instead of starting an
interpreter; with 0 each stub starts at the load, as before. An idle pool process's memory, which
the pool's budget counts, includes its spare's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import requests

from activator.scaler.local.process_memory import pss_bytes, tree_pss_bytes
from tests.fixtures.models import add_sub_body, make_add_sub
from tests.fixtures.onnx_models import make_onnx_add
from tests.fixtures.up_process import UpProcess, light_args

pytestmark = pytest.mark.integration

_TAKEN = "stub pid"
_SPARE = "(a spare, started ahead)"
_HOLDS_32_MIB = "import sys; held = b'x' * (32 << 20); sys.stdin.read()"


def _infer(up: UpProcess) -> None:
    answer = requests.post(f"{up.url}/v2/models/add_sub/infer", json=add_sub_body(), timeout=120)
    assert answer.status_code == 200, (answer.text, up.log())
    assert answer.json()["outputs"][1]["data"] == [0, 0, 0, 0]


@pytest.mark.parametrize("spares", ["1", "0"])
def test_a_python_models_cold_start_takes_the_pool_processs_spare(
    tmp_path: Path, spares: str
) -> None:
    repo = tmp_path / "repo"
    make_add_sub(repo)
    up = UpProcess(repo, *light_args(repo), "--python-spare-stubs", spares)
    try:
        if spares == "1":
            up.wait_for(lambda: "spare Python stub pid" in up.log(), 60, "the pool's spare")
        _infer(up)  # from zero: the cold start loads add_sub into the claimed pool process
        up.wait_for(lambda: _TAKEN in up.log(), 30, "the replica's stub line")
        ready = [line for line in up.log().splitlines() if _TAKEN in line and "ready" in line]
        assert len(ready) == 1, up.log()
        assert (_SPARE in ready[0]) == (spares == "1"), up.log()
    finally:
        up.stop()


def _stubs_under(pid: int) -> list[int]:
    return [
        p.pid
        for p in psutil.Process(pid).children(recursive=True)
        if "runtime.python.stub.stub_main" in " ".join(p.cmdline())
    ]


def test_by_default_only_a_repository_with_a_python_model_gets_spares(tmp_path: Path) -> None:
    onnx_only, with_python = tmp_path / "onnx", tmp_path / "python"
    make_onnx_add(onnx_only / "repo")
    make_onnx_add(with_python / "repo")
    make_add_sub(with_python / "repo")
    ups = [UpProcess(d / "repo", *light_args(d / "repo")) for d in (onnx_only, with_python)]
    try:
        quiet, python = ups
        python.wait_for(lambda: len(_stubs_under(python.proc.pid)) == 1, 60, "the spare")
        assert "spare Python stub pid" in python.log()
        # The ONNX-only pool process is ready at least as long: it started no stub.
        assert _stubs_under(quiet.proc.pid) == [] and "spare Python stub" not in quiet.log()
    finally:
        for up in ups:
            up.stop()


def test_a_model_with_two_instances_gets_two_spares_and_takes_both(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_add_sub(repo, instance_count=2)
    up = UpProcess(repo, *light_args(repo))
    try:
        up.wait_for(lambda: len(_stubs_under(up.proc.pid)) == 2, 60, "two spares")
        _infer(up)
        up.wait_for(lambda: up.log().count(_TAKEN) >= 2, 30, "both instances' stub lines")
        ready = [line for line in up.log().splitlines() if _TAKEN in line and "ready" in line]
        assert len(ready) == 2 and all(_SPARE in line for line in ready), up.log()
    finally:
        up.stop()


def test_the_pool_processs_spare_imports_what_thaw_up_names(tmp_path: Path) -> None:
    repo, probe = tmp_path / "repo", tmp_path / "imported_by"
    make_add_sub(repo)
    (tmp_path / "spare_probe.py").write_text(
        f"import os\nopen({str(probe)!r}, 'a').write(str(os.getpid()) + '\\n')\n"
    )
    up = UpProcess(
        repo, *light_args(repo), "--python-spare-stub-imports", "spare_probe",
        env={"PYTHONPATH": str(tmp_path)},
    )  # fmt: skip
    try:
        up.wait_for(probe.exists, 60, "the pool process's spare to import spare_probe")
        (importer,) = probe.read_text().split()
        _infer(up)
        ready = [line for line in up.log().splitlines() if _TAKEN in line and "ready" in line]
        assert len(ready) == 1 and f"stub pid {importer} ready {_SPARE}" in ready[0], up.log()
    finally:
        up.stop()


def _spare_imports(up: UpProcess) -> list[str]:
    """The `--import` list of the pool process's spare stub (its command line)."""
    up.wait_for(lambda: len(_stubs_under(up.proc.pid)) == 1, 60, "the pool process's spare")
    (pid,) = _stubs_under(up.proc.pid)
    argv = psutil.Process(pid).cmdline()
    return argv[argv.index("--import") + 1].split(",") if "--import" in argv else []


@pytest.mark.parametrize("given", [None, ""])
def test_by_default_the_spare_imports_the_installed_packages_the_models_import(
    tmp_path: Path, given: str | None
) -> None:
    repo = tmp_path / "repo"
    make_add_sub(repo)
    model_py = repo / "add_sub" / "1" / "model.py"
    model_py.write_text(f"import psutil\nimport yaml\n{model_py.read_text()}")
    flags = [] if given is None else ["--python-spare-stub-imports", given]
    up = UpProcess(repo, *light_args(repo), *flags)
    try:
        if given is None:
            assert _spare_imports(up) == ["psutil", "yaml"]
            assert "spare Python stubs import psutil, yaml ahead" in up.log()
        else:  # given empty: none
            assert _spare_imports(up) == []
        _infer(up)
        ready = [line for line in up.log().splitlines() if _TAKEN in line and "ready" in line]
        assert len(ready) == 1 and _SPARE in ready[0], up.log()
    finally:
        up.stop()


@pytest.mark.parametrize(
    ("flag", "value", "words"),
    [
        ("--python-spare-stubs", "-1", "`--python-spare-stubs` = -1, must be in [0, 8]"),
        ("--python-spare-stub-imports", "torch, ../x", "'../x' is not a Python module name"),
    ],
)
def test_thaw_up_checks_the_flags(tmp_path: Path, flag: str, value: str, words: str) -> None:
    repo = tmp_path / "repo"
    make_add_sub(repo)
    done = subprocess.run(
        [sys.executable, "-m", "thaw.cli", "up", str(repo), flag, value],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert words in done.stderr


def test_an_idle_processs_memory_counts_its_children() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLDS_32_MIB],
        stdin=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while (pss_bytes(child.pid) or 0) < 32 << 20:  # its bytearray touched
            assert time.monotonic() < deadline, "the child never grew"
            time.sleep(0.05)
        own, tree = pss_bytes(os.getpid()), tree_pss_bytes(os.getpid())
        assert own is not None and tree is not None
        assert tree >= own + (32 << 20) - (4 << 20)  # the child's, within what moved meanwhile
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(30)
    assert tree_pss_bytes(child.pid) is None  # gone: unreadable, as pss_bytes says
