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


def test_an_unknown_flag_is_refused_by_the_command_it_was_given_to() -> None:
    """`thaw up REPO --bogus 1` names `thaw up` and its usage, not the top-level
    `thaw [-h] COMMAND ...` (argparse's default for a subcommand's unknown flags). (A
    tritonserver flag is never "unrecognized": tests/unit/activator/test_up_triton_command_line.)"""
    for argv, prog in (
        (["up", "/tmp", "--bogus", "1"], "thaw up"),
        (["snapshot", "ls", "--store", "/tmp", "--bogus"], "thaw snapshot ls"),
        (["status", "--bogus"], "thaw status"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "thaw.cli", *argv], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 2
        assert proc.stderr.startswith(f"usage: {prog} ")
        unknown = " ".join(argv[argv.index("--bogus") :])
        assert proc.stderr.splitlines()[-1] == f"{prog}: error: unrecognized arguments: {unknown}"


def test_a_cloud_port_flag_given_to_thaw_up_says_thaw_serve_has_it() -> None:
    for flag in ("--allow-vertex-ai=true", "--sagemaker-port=8080"):
        proc = subprocess.run(
            [sys.executable, "-m", "thaw.cli", "up", "/tmp", flag],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert proc.returncode == 2
        name = flag.split("=")[0]
        assert f"{name} is a thaw serve flag: thaw up has no Vertex AI or SageMaker port" in (
            proc.stderr
        )
