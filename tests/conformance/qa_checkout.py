"""Triton's QA files read from a local git mirror, and the unittest runs that report on them.

The runners of tests/conformance share these: `git_show` reads one file of a ref, `extract`
writes a list of them under a temporary root as `qa/...` (Triton's tests import `../common`),
`run_unittest` runs test ids with tests.conformance.unittest_json in a QA directory, and
`Result` is one reported row. `mirror_parser` and `have_mirror` are every runner's `--mirror`
flag and its skip when there is none.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Result",
    "extract",
    "git_show",
    "have_mirror",
    "mirror_parser",
    "port_in_use",
    "print_results",
    "qa_python_path",
    "run_unittest",
]

_PROJECT_ROOT = Path(__file__).resolve().parents[2]
_STANDINS = Path(__file__).resolve().parent / "standins"


@dataclass(frozen=True)
class Result:
    ref: str
    file: str
    test: str
    outcome: str  # passed | failed | error | skipped | deselected
    detail: str


def mirror_parser(description: str) -> argparse.ArgumentParser:
    """A runner's argument parser, with `--mirror` (default `$TRITON_SERVER_MIRROR`)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--mirror",
        type=Path,
        default=os.environ.get("TRITON_SERVER_MIRROR", ""),
        help="bare git dir of triton-inference-server/server (default $TRITON_SERVER_MIRROR)",
    )
    return parser


def have_mirror(mirror: Path, ref: str, path: str) -> bool:
    """Whether `mirror` holds `path` at `ref`; when not, says the run is skipped (exit 0)."""
    if str(mirror) and git_show(mirror, ref, path) is not None:
        return True
    if str(mirror) in ("", "."):  # unset: Path("") is "."
        why = (
            "no Triton server mirror: give --mirror DIR or $TRITON_SERVER_MIRROR, a bare git "
            "mirror of triton-inference-server/server"
        )
    else:
        why = f"the Triton server mirror {str(mirror)!r} has no {ref}:{path}"
    print(f"skipped: {why}", file=sys.stderr)
    return False


def git_show(mirror: Path, ref: str, path: str) -> bytes | None:
    """`path` at `ref` in the bare mirror, or None when either is missing."""
    proc = subprocess.run(
        ["git", "-C", str(mirror), "show", f"{ref}:{path}"], capture_output=True, check=False
    )
    return proc.stdout if proc.returncode == 0 else None


def extract(mirror: Path, ref: str, paths: Iterable[str], root: Path) -> None:
    """Write each mirror path under `root` (same relative path); SystemExit naming a missing one."""
    for path in paths:
        content = git_show(mirror, ref, path)
        if content is None:
            raise SystemExit(f"{ref}:{path} is not in {mirror}")
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(content)


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def qa_python_path() -> str:
    """PYTHONPATH for Triton's QA clients: this checkout, and tests/conformance/standins
    (Triton's `triton_shm_monitor`)."""
    return os.pathsep.join((str(_PROJECT_ROOT), str(_STANDINS)))


def run_unittest(
    qa_dir: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """tests.conformance.unittest_json, run in Triton's QA dir (its tests import ../common),
    with tests/conformance/standins (Triton's `triton_shm_monitor`) on the path."""
    full_env = {**os.environ, **(env or {}), "PYTHONPATH": qa_python_path()}
    return subprocess.run(
        [sys.executable, "-m", "tests.conformance.unittest_json", *args],
        cwd=qa_dir, env=full_env, capture_output=True, text=True, check=False, timeout=1800,
    )  # fmt: skip


def print_results(results: list[Result]) -> None:
    """A markdown table on stdout; per ref, `passed/selected` on stderr."""
    print("| ref | file | test | result | detail |")
    print("|---|---|---|---|---|")
    for r in results:
        print(f"| {r.ref} | {r.file} | {r.test} | {r.outcome} | {r.detail} |")
    for ref in dict.fromkeys(r.ref for r in results):
        mine = [r for r in results if r.ref == ref and r.outcome != "deselected"]
        passed = sum(r.outcome == "passed" for r in mine)
        print(f"{ref}: {passed}/{len(mine)} selected tests passed", file=sys.stderr)
