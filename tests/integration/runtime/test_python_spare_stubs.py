"""Python stubs started ahead (`thaw serve --python-spare-stubs`): a Python model's load takes a
live spare of the same interpreter and environment instead of starting an interpreter; a spare
that died or was started under another environment is never used; the spares no load took end
once a load is done (a replica serving an ONNX model keeps no idle interpreter). Real stub
processes and a real `thaw serve`.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import requests

from runtime.python.spare_stubs import MISS_REASONS, SpareStubs
from tests.fixtures.models import add_sub_body, make_add_sub
from tests.fixtures.onnx_models import make_onnx_add
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

_PYTHON = Path(sys.executable)
_READY = re.compile(r"instance (\S+): stub pid (\d+) ready( \(a spare, started ahead\))?")


def _eventually(check: Callable[[], bool], what: str, within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within_s} s: {what}")
        time.sleep(0.05)


def _stubs_of(pid: int) -> list[int]:
    """The stub processes (`runtime.python.stub.stub_main`) among `pid`'s children."""
    out = []
    for child in psutil.Process(pid).children():
        try:
            if "runtime.python.stub.stub_main" in child.cmdline():
                out.append(child.pid)
        except psutil.NoSuchProcess:
            continue
    return out


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_spare_is_taken_once_and_released_spares_exit() -> None:
    spares = SpareStubs(2)
    spares.fill()
    try:
        assert len(spares) == 2
        first = spares.take(_PYTHON)
        assert first is not None and first.proc.poll() is None
        assert spares.take(Path("/opt/other-env/bin/python")) is None  # another interpreter
        assert len(spares) == 1  # ... leaves the spare for a load that can use it
        second = spares.take(_PYTHON)
        assert second is not None and second.proc.pid != first.proc.pid
        assert spares.take(_PYTHON) is None and spares.taken == 2
        assert spares.at_load == 1  # the last take (another interpreter's is not counted)
        assert spares.missed == {"none_left": 1, "exited": 0, "environment": 0}
    finally:
        spares.release()
    for taken in (first, second):  # the caller owns what it took: end them as a load would
        taken.sock.close()
        assert taken.proc.wait(30) == 0  # the end of its socket: a clean exit


def test_release_ends_the_spares_left_and_fill_starts_no_more() -> None:
    spares = SpareStubs(1)
    spares.fill()
    (spare,) = spares._spares
    pid = spare.stub.proc.pid
    spares.release()
    assert spares.released and len(spares) == 0
    _eventually(lambda: spare.stub.proc.poll() is not None, "the released spare exits")
    assert spare.stub.proc.returncode == 0
    spares.fill()
    assert len(spares) == 0 and spares.take(_PYTHON) is None
    assert _gone(pid)


def test_a_dead_spare_or_one_from_another_environment_is_never_taken(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="runtime.python.spare_stubs")
    spares = SpareStubs(2)
    spares.fill()
    try:
        dead, other = (s.stub for s in spares._spares)
        dead.proc.kill()
        dead.proc.wait(30)
        monkeypatch.setenv("THAW_TEST_SPARE_ENV", "changed after the spares started")
        assert spares.take(_PYTHON) is None  # one dead, one started before the change
        assert len(spares) == 0
        assert spares.missed == {"none_left": 0, "exited": 1, "environment": 0}
        assert f"pid {dead.proc.pid} exited (status -9)" in caplog.text
        # What changed is named, never its value.
        assert "changed since it started (THAW_TEST_SPARE_ENV)" in caplog.text
        assert "changed after the spares started" not in caplog.text
        _eventually(lambda: other.proc.poll() is not None, "the stale spare ends")
    finally:
        spares.release()


def test_a_miss_is_a_load_the_spares_were_meant_for(monkeypatch: pytest.MonkeyPatch) -> None:
    spares = SpareStubs(1)
    spares.fill()
    try:
        (spare,) = (s.stub for s in spares._spares)
        monkeypatch.setenv("THAW_TEST_SPARE_ENV", "changed after the spares started")
        assert spares.take(_PYTHON) is None  # alive, but from before the change
        assert spares.missed == {"none_left": 0, "exited": 0, "environment": 1}
        spares.release()  # the replica's first load is done: later loads are not misses
        assert spares.take(_PYTHON) is None
        assert spares.at_load == 2 and sum(spares.missed.values()) == 1
        _eventually(lambda: spare.proc.poll() is not None, "the stale spare ends")
    finally:
        spares.release()
    none = SpareStubs(0)  # no spares configured: a load starting its stub misses nothing
    none.fill()
    assert none.take(_PYTHON) is None and none.at_load == 1 and sum(none.missed.values()) == 0


def test_a_spare_imports_what_it_was_told_to_before_its_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = tmp_path / "imported_by"
    (tmp_path / "spare_probe.py").write_text(
        f"import os\nopen({str(probe)!r}, 'a').write(str(os.getpid()) + '\\n')\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # stub_env puts Thaw's root before it
    spares = SpareStubs(1, imports=("spare_probe", "no_such_module_here"))
    spares.fill()
    try:
        spawned = spares.take(_PYTHON)
        assert spawned is not None
        _eventually(probe.exists, "the spare imports spare_probe while it waits")
        assert probe.read_text().split() == [str(spawned.proc.pid)]
        assert spawned.proc.poll() is None  # a module it cannot import does not end it
    finally:
        spares.release()
    spawned.sock.close()
    assert spawned.proc.wait(30) == 0


def test_a_count_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match=r"must be in \[0, 8\]"):
        SpareStubs(9)


def _load(server: ServeProcess, name: str) -> None:
    answer = requests.post(f"{server.url}/v2/repository/models/{name}/load", timeout=120)
    assert answer.status_code == 200, (answer.text, server.logs())


def _spare_metrics(server: ServeProcess) -> dict[str, float]:
    """`thaw_python_stub_starts_total` by source, `thaw_python_spare_stubs` (as `idle`) and
    the misses, `thaw_python_spare_stub_misses_total`, summed (as `missed`), from /metrics."""
    text = requests.get(f"{server.metrics_url or server.url}/metrics", timeout=30).text
    found = {}
    for match in re.finditer(
        r'^(thaw_python_stub_starts_total\{source="(\w+)"\}|thaw_python_spare_stubs) (\S+)$',
        text, re.MULTILINE,
    ):  # fmt: skip
        found[match.group(2) or "idle"] = float(match.group(3))
    misses = re.findall(
        r'^thaw_python_spare_stub_misses_total\{reason="(\w+)"\} (\S+)$', text, re.MULTILINE
    )
    assert sorted(reason for reason, _ in misses) == sorted(MISS_REASONS), text
    found["missed"] = sum(float(value) for _, value in misses)
    return found


def _add_sub_works(server: ServeProcess) -> None:
    answer = requests.post(f"{server.url}/v2/models/add_sub/infer", json=add_sub_body(), timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json()["outputs"][0]["data"] == [2, 4, 6, 8]


def _two_instances_and_spares(tmp_path: Path, spares: int) -> ServeProcess:
    """`thaw serve` (explicit mode) over add_sub with two instances, its `spares` started."""
    make_add_sub(tmp_path / "repo", instance_count=2)
    server = ServeProcess(
        tmp_path / "repo", "--model-control-mode", "explicit", "--python-spare-stubs", str(spares)
    )
    try:
        server.wait_ready()
        _eventually(lambda: len(_stubs_of(server.proc.pid)) == spares, "spares before any load")
    except BaseException:
        server.stop()
        raise
    return server


def test_thaw_serve_loads_a_python_model_into_its_spares(tmp_path: Path) -> None:
    server = _two_instances_and_spares(tmp_path, 2)
    try:
        spares = set(_stubs_of(server.proc.pid))
        _load(server, "add_sub")
        ready = _READY.findall(server.logs())
        assert {int(pid) for _, pid, _ in ready} == spares, server.logs()
        assert all(spare for _, _, spare in ready), server.logs()
        assert set(_stubs_of(server.proc.pid)) == spares  # no stub started for the load
        assert _spare_metrics(server) == {"spare": 2, "load": 0, "idle": 0, "missed": 0}
        _add_sub_works(server)
    finally:
        server.stop()


def test_a_load_with_more_instances_than_spares_is_a_miss_on_metrics(tmp_path: Path) -> None:
    server = _two_instances_and_spares(tmp_path, 1)
    try:
        _load(server, "add_sub")  # one instance takes the spare, the other starts its own
        assert _spare_metrics(server) == {"spare": 1, "load": 1, "idle": 0, "missed": 1}
        text = requests.get(f"{server.metrics_url or server.url}/metrics", timeout=30).text
        assert 'thaw_python_spare_stub_misses_total{reason="none_left"} 1' in text.splitlines()
        _add_sub_works(server)
    finally:
        server.stop()


def test_auto_imports_what_the_repositorys_python_models_import(tmp_path: Path) -> None:
    # A pool pod's `thaw serve` (the chart's default): it reads the repository it mounts.
    repo = tmp_path / "repo"
    make_add_sub(repo)
    model_py = repo / "add_sub" / "1" / "model.py"
    model_py.write_text(f"import psutil\n{model_py.read_text()}")
    make_add_sub(repo, "other")
    (repo / "other" / "1" / "model.py").write_text("import yaml\n")
    make_add_sub(repo, "broken")  # a config that does not parse: the others are read
    (repo / "broken" / "config.pbtxt").write_text("name: {{{\n")
    server = ServeProcess(
        repo, "--model-control-mode", "explicit", "--python-spare-stubs", "1",
        "--python-spare-stub-imports", "auto",
    )  # fmt: skip
    try:
        server.wait_ready()
        _eventually(lambda: len(_stubs_of(server.proc.pid)) == 1, "a spare before any load")
        (spare,) = _stubs_of(server.proc.pid)
        argv = psutil.Process(spare).cmdline()
        assert argv[argv.index("--import") + 1] == "psutil,yaml", argv
        assert "spare Python stubs import psutil, yaml ahead" in server.logs()
        _load(server, "add_sub")
        ((_, pid, ahead),) = _READY.findall(server.logs())
        assert int(pid) == spare and ahead, server.logs()
        _add_sub_works(server)
    finally:
        server.stop()


@pytest.mark.parametrize("python", [True, False])
def test_auto_starts_as_many_as_the_python_model_with_the_most_instances(
    tmp_path: Path, python: bool
) -> None:
    repo = tmp_path / "repo"
    make_onnx_add(repo)
    if python:
        make_add_sub(repo, instance_count=2)
        make_add_sub(repo, "single")
    server = ServeProcess(
        repo, "--model-control-mode", "explicit", "--python-spare-stubs", "auto",
        "--python-spare-stub-imports", "auto",
    )  # fmt: skip
    try:
        server.wait_ready()  # the spares are started in the warm-up, before ready
        wanted = 2 if python else 0
        line = f"spare Python stubs import nothing ahead, {wanted} of them"
        _eventually(lambda: line in server.logs(), "the warm-up's line")
        _eventually(lambda: len(_stubs_of(server.proc.pid)) == wanted, f"{wanted} spares")
        if python:
            _load(server, "add_sub")  # both instances take a spare
            ready = _READY.findall(server.logs())
            assert len(ready) == 2 and all(ahead for _, _, ahead in ready), server.logs()
            _add_sub_works(server)
    finally:
        server.stop()


def test_spares_no_load_took_end_after_the_load(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_onnx_add(repo)
    make_add_sub(repo)
    server = ServeProcess(repo, "--model-control-mode", "explicit", "--python-spare-stubs", "1")
    try:
        server.wait_ready()
        _eventually(lambda: len(_stubs_of(server.proc.pid)) == 1, "a spare before any load")
        (spare,) = _stubs_of(server.proc.pid)
        _load(server, "onnx_add")  # not a Python model: the spare is released
        _eventually(lambda: _gone(spare), "the spare no load took exits")
        assert "released 1 spare Python stub(s)" in server.logs()
        assert _spare_metrics(server) == {"spare": 0, "load": 0, "idle": 0, "missed": 0}
        _load(server, "add_sub")  # a Python model loaded later starts its own stub
        (line,) = _READY.findall(server.logs())
        assert not line[2] and int(line[1]) != spare, server.logs()
        # Its own stub after the spares were released: a start at load, not a miss.
        assert _spare_metrics(server) == {"spare": 0, "load": 1, "idle": 0, "missed": 0}
        _add_sub_works(server)
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("flag", "value", "words"),
    [
        ("--python-spare-stubs", "9", "`--python-spare-stubs` = 9, must be in [0, 8]"),
        ("--python-spare-stubs", "many", "'many' is not a number of stubs (0-8) or 'auto'"),
        ("--python-spare-stub-imports", "torch,os;rm", "'os;rm' is not a Python module name"),
    ],
)
def test_the_flags_are_checked(tmp_path: Path, flag: str, value: str, words: str) -> None:
    make_add_sub(tmp_path / "repo")
    server = ServeProcess(tmp_path / "repo", flag, value)
    try:
        assert server.proc.wait(60) == 2
        assert words in server.logs()
    finally:
        server.stop()
