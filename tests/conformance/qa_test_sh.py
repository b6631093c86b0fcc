"""Running one of Triton's QA test.sh scripts itself, with bash, against `thaw serve` or through
`thaw up` (tests.conformance.triton_l0_config_json, triton_l0_cmdline_trace,
triton_l0_custom_model_config).

    run_test_sh(suite, prepare, argv, timeout_s=...)  -> exit status (0: "Test Passed")

`prepare(mirror, work)` lays the suite out under `work/qa/<name>` (its files from the mirror,
edited: tests.conformance.triton_qa.apply_edits) and returns its directory and what test.sh's
environment adds (`THAW_DATADIR`, ...); test.sh runs there with `THAW_SERVER_SHIM`, a two-line
`tritonserver` that runs `thaw serve` (`--server up`: `thaw up`, every model at zero, one
warm-pool process, no image build) with the flags test.sh gives, this Python first on PATH
(test.sh's `python3`: its clients need tritonclient) and this checkout on PYTHONPATH. Without a
server mirror holding the suite, the run says so and passes. `--server` is repeatable (each
kind runs test.sh in a directory prepared afresh); `--keep DIR` copies the suite's directory
(its logs and outputs) to DIR/<kind> after each run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from tests.conformance.qa_checkout import git_show
from tests.conformance.qa_servers import add_server_argument
from tests.fixtures.triton_qa_suite_repos import Mirror

__all__ = ["Prepare", "mirror_at", "run_test_sh", "shim"]

# (mirror, work directory) -> (the suite's directory, what test.sh's environment adds)
Prepare = Callable[[Mirror, Path], tuple[Path, dict[str, str]]]


def shim(work: Path, kind: str = "serve") -> Path:
    """A `tritonserver` that runs `thaw <kind>` with the flags it is given (`thaw up`: every
    model at zero, one warm-pool process, no image build, its cache under `work`)."""
    path = work / "tritonserver"
    extra = "" if kind == "serve" else f' --warm-pool 1 --no-image-build --cache "{work / "cache"}"'
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m thaw.cli {kind}{extra} "$@"\n')
    path.chmod(0o755)
    return path


def mirror_at(path: Path, ref: str, probe: str) -> Mirror | None:
    """Triton's files at `ref` in the server mirror at `path`; None, said on stderr, when
    there is no mirror there holding `probe` (the run is then skipped)."""
    if str(path) in ("", ".") or git_show(path, ref, probe) is None:
        print(f"skipped: no Triton server mirror with {probe} at {ref} (--mirror or "
              "$TRITON_SERVER_MIRROR)", file=sys.stderr)  # fmt: skip
        return None

    def read(name: str) -> bytes:
        content = git_show(path, ref, name)
        if content is None:
            raise SystemExit(f"{ref}:{name} is not in {path}")
        return content

    return Mirror(read)


def run_test_sh(
    suite: str, prepare: Prepare, argv: list[str] | None, *, timeout_s: float, doc: str = ""
) -> int:
    """Run qa/`suite`'s test.sh on each `--server` as the module docstring says; print its
    failures and verdicts. 0 when every run passed."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--mirror", type=Path, default=os.environ.get("TRITON_SERVER_MIRROR", ""))
    parser.add_argument("--ref", default="v2.51.0")
    parser.add_argument(
        "--keep", type=Path, help="copy the suite's directory (its logs, outputs) here after"
    )
    add_server_argument(parser)
    args = parser.parse_args(argv)
    mirror = mirror_at(args.mirror, args.ref, f"qa/{suite}/test.sh")
    if mirror is None:
        return 0
    failed = 0
    for kind in args.server or ["serve"]:
        keep = None if args.keep is None else args.keep / kind
        failed += _run_once(suite, prepare, mirror, kind, args.ref, keep, timeout_s)
    return 1 if failed else 0


def _run_once(
    suite: str, prepare: Prepare, mirror: Mirror, kind: str, ref: str, keep: Path | None,
    timeout_s: float,
) -> int:  # fmt: skip
    with tempfile.TemporaryDirectory(prefix=f"thaw-{suite.lower()}-") as tmp:
        work = Path(tmp)
        directory, extra = prepare(mirror, work)
        env = {
            **os.environ,
            **extra,
            "THAW_SERVER_SHIM": str(shim(work, kind)),
            "PYTHONPATH": os.pathsep.join(
                filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])
            ),
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
        }
        proc = subprocess.run(
            ["bash", "test.sh", ref.lstrip("v")], cwd=directory, env=env,
            capture_output=True, text=True, timeout=timeout_s, check=False,
        )  # fmt: skip
        if keep is not None:
            shutil.copytree(directory, keep, dirs_exist_ok=True)
    output = proc.stdout + proc.stderr
    for line in output.splitlines():
        if line.startswith("*** ") or " expects " in line:
            print(line)
    passed = proc.returncode == 0 and "Test Passed" in output
    print(f"{suite} on thaw {kind}: {'passed' if passed else 'FAILED'} (test.sh exit "
          f"{proc.returncode})")  # fmt: skip
    if not passed:
        print("\n".join(output.splitlines()[-60:]))
    return 0 if passed else 1
