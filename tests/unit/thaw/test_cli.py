"""`thaw` dispatches to each package's sub-command and explains itself."""

from __future__ import annotations

import subprocess
import sys


def test_thaw_without_a_command_prints_help_and_exits_2() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "thaw.cli"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    for command in ("serve", "up", "status", "snapshot"):
        assert f"thaw {command}" in proc.stdout


def test_serve_help_names_the_repository_argument() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "thaw.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0
    assert "--model-control-mode" in proc.stdout
