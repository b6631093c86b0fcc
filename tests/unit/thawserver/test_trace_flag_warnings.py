"""tritonserver's warning for each deprecated trace flag given, in its words
(src/command_line_parser.cc at v2.51.0; qa/L0_cmdline_trace counts one of each), on both CLIs."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from thawserver.settings_flags import add_trace_flags, trace_flag_warnings

_ROOT = Path(__file__).resolve().parents[3]


def _warnings(*argv: str) -> list[str]:
    parser = argparse.ArgumentParser()
    add_trace_flags(parser.add_argument_group())
    return trace_flag_warnings(parser.parse_args(list(argv)))


def test_each_deprecated_flag_given_warns_once_per_occurrence() -> None:
    assert _warnings() == []
    assert _warnings("--trace-config", "rate=2", "--trace-config", "level=TIMESTAMPS") == []
    assert _warnings("--trace-file=t.json") == [
        "Warning: '--trace-file' has been deprecated and will be removed in future releases. "
        "Please use '--trace-config triton,file=<filepath> instead."
    ]
    lines = _warnings(
        "--trace-level=TIMESTAMPS", "--trace-level=TENSORS", "--trace-rate=9",
        "--trace-count=100", "--trace-log-frequency=50",
    )  # fmt: skip
    assert [line.split("'")[1] for line in lines] == [
        "--trace-level", "--trace-level", "--trace-rate", "--trace-count", "--trace-log-frequency",
    ]  # fmt: skip
    assert lines[0].endswith("Please use '--trace-config level=<OFF|TIMESTAMPS|TENSORS> instead.")
    assert lines[-1].endswith(
        "Please use '--trace-config triton,log-frequency=<log frequency value> instead."
    )


@pytest.mark.parametrize("command", ["serve", "up"])
def test_both_servers_print_them_on_stderr_before_anything_else(
    tmp_path: Path, command: str
) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "thaw.cli", command, str(tmp_path / "missing"),
         "--trace-rate=100", "--trace-file", str(tmp_path / "t.json")],
        capture_output=True, text=True, cwd=_ROOT, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode != 0  # the missing repository; the warnings come first
    first, second = out.stderr.splitlines()[:2]
    assert first.startswith("Warning: '--trace-file' has been deprecated")
    assert second.startswith("Warning: '--trace-rate' has been deprecated")
