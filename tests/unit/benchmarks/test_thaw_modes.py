"""The benchmark runs one thaw server per Python runtime mode, beside the other peers."""

from __future__ import annotations

import os
from pathlib import Path

from benchmarks.load_client import LoadResult
from benchmarks.serve_report import Cell, is_thaw, render_table
from benchmarks.serve_throughput import (
    build_repo,
    python_runtime,
    server_names,
    set_python_runtime,
)
from benchmarks.workloads import write_add_sub
from runtime.model_config import parse_config
from runtime.python.placement import PythonRuntime, placement


def test_thaw_expands_to_one_server_per_mode() -> None:
    assert server_names(["thaw", "triton"], []) == ["thaw", "triton"]
    assert server_names(["thaw", "triton"], ["process", "in_process"]) == [
        "thaw[process]",
        "thaw[in_process]",
        "triton",
    ]


def test_a_base_tree_gives_each_thaw_a_twin_that_is_no_peer() -> None:
    names = server_names(["thaw", "triton"], ["process"], with_base=True)
    assert names == ["thaw-base[process]", "thaw[process]", "triton"]
    assert [python_runtime(n) for n in names] == ["process", "process", None]
    assert [is_thaw(n) for n in names] == [True, True, False]
    assert server_names(["thaw"], [], with_base=True) == ["thaw-base", "thaw"]
    assert python_runtime("thaw") is None


def test_the_mode_reaches_only_that_servers_copy_of_the_config(tmp_path: Path) -> None:
    write_add_sub(tmp_path / "models")
    source = tmp_path / "models" / "add_sub" / "config.pbtxt"
    repo = build_repo(tmp_path / "run", "thaw[process]", {"add_sub": source.parent})
    copied = repo / "add_sub" / "config.pbtxt"
    assert os.path.samefile(copied, source)  # hard-linked, as every server's repository is
    set_python_runtime(copied, "process")
    assert placement(parse_config(copied.read_text(), str(copied))) == PythonRuntime.PROCESS
    assert "thaw.python_runtime" not in source.read_text()  # the other servers' file is intact


def test_every_thaw_mode_is_compared_with_the_best_peer_not_with_each_other() -> None:
    def cell(server: str, ok: int) -> Cell:
        return Cell(server, "add_sub", 8, LoadResult(8, 1.0, ok, 0, (1.0,) * ok))

    table = render_table([cell("thaw[process]", 300), cell("thaw[in_process]", 900),
                          cell("triton", 200)])  # fmt: skip
    header = [c.strip() for c in table.splitlines()[0].split("|")]
    rows = {
        line.split("|")[4].strip(): [c.strip() for c in line.split("|")]
        for line in table.splitlines()[2:]
    }
    vs_peer = header.index("vs best peer")
    assert rows["thaw[process]"][vs_peer] == "1.50x"
    assert rows["thaw[in_process]"][vs_peer] == "4.50x"


def test_cpu_per_request_is_compared_with_the_thriftiest_peer() -> None:
    def cell(server: str, ok: int, cpu_s: float | None) -> Cell:
        return Cell(server, "add_sub", 8, LoadResult(8, 1.0, ok, 0, (1.0,) * ok, cpu_s))

    table = render_table([cell("thaw[process]", 1000, 0.3), cell("triton", 1000, 0.25),
                          cell("kserve", 500, 0.5), cell("mlserver", 10, None)])  # fmt: skip
    header = [c.strip() for c in table.splitlines()[0].split("|")]
    rows = {
        line.split("|")[4].strip(): [c.strip() for c in line.split("|")]
        for line in table.splitlines()[2:]
    }
    cpu, ratio = header.index("CPU µs/req"), header.index("CPU vs peer")
    assert rows["thaw[process]"][cpu] == "300"  # 0.3 s over 1000 requests
    assert rows["kserve"][cpu] == "1000"
    assert rows["thaw[process]"][ratio] == "1.20x"  # over triton's 250, the lowest peer's
    assert rows["mlserver"][cpu] == "-" and rows["mlserver"][ratio] == "-"
