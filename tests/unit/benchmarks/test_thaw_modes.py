"""The benchmark runs one thaw server per Python runtime mode, beside the other peers."""

from __future__ import annotations

import os
from pathlib import Path

from benchmarks.load_client import LoadResult
from benchmarks.serve_throughput import (
    Cell,
    build_repo,
    render_table,
    server_names,
    set_python_runtime,
)
from benchmarks.workloads import write_add_sub
from runtime.model_config import parse_config
from runtime.python_placement import PythonRuntime, placement


def test_thaw_expands_to_one_server_per_mode() -> None:
    assert server_names(["thaw", "triton"], []) == ["thaw", "triton"]
    assert server_names(["thaw", "triton"], ["process", "in_process"]) == [
        "thaw[process]",
        "thaw[in_process]",
        "triton",
    ]


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
    rows = {line.split("|")[4].strip(): line for line in table.splitlines()[2:]}
    assert rows["thaw[process]"].endswith("| 1.50x |")
    assert rows["thaw[in_process]"].endswith("| 4.50x |")
