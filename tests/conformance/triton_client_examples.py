"""Run the Triton Python client's own examples, unchanged, against `thaw serve`, through
`thaw up` (every model at zero) and against real Triton 2.51, with one model repository.

    .venv/bin/python -m tests.conformance.triton_client_examples [--mirror GIT_DIR] [--ref HEAD]
        [--server serve|up|triton ...] [--only NAME ...] [--diff] [--json FILE]

The examples (`src/python/examples/*.py` of triton-inference-server/client) are never part of
this project: they are read at run time from a local git mirror (`--mirror`, default
`$TRITON_CLIENT_MIRROR`) into a temporary directory; without a mirror the run says so and exits 0.
Their models (TensorFlow graphs and custom C++ backends in Triton) are Python-backend models of
the same names, configs and semantics (tests/fixtures/client_example_models.py), so real Triton's
pip build (python backend only; benchmarks/peers.py `TritonPeer`) serves the same repository.
The runs and server starts are listed in client_example_cases, the servers started by
client_example_servers, each run's verdict and the table made by client_example_results.

Each example runs as Triton's qa/L0_http and qa/L0_grpc test.sh run it (`-v`, `-d` for the
dynamic-sequence variants), with `-u HOST:PORT` of the server's HTTP or gRPC port; it passes
when it exits 0 and printed its `PASS...` line where it has one. The model-control examples get
a server of their own in explicit mode on a repository of the seven `simple*` models (they check
the index holds seven over HTTP, eight over gRPC). An example that hard-codes localhost:8000/8001
runs only when the servers can take Triton's ports (under `unshare -n`); the CUDA shared-memory
and image examples are skipped, each row saying why. `--diff` prints, per example, the
difference between Triton's and Thaw's output (ports, timings and random ids masked).

Exit status: 1 when an example failed on `thaw serve` or `thaw up`. Triton's failures are
reported, not counted; a difference Thaw keeps on purpose, named in its case with the line it
prints, is reported `deliberate`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.conformance.client_example_cases import CASES, REPOSITORIES, Case
from tests.conformance.client_example_results import Outcome, output_diff, results_table, verdict
from tests.conformance.client_example_servers import Run, start
from tests.conformance.qa_checkout import git_show
from tests.conformance.qa_servers import unsupported
from tests.fixtures.client_example_models import write_repository

__all__ = ["EXAMPLES_DIR", "extract_examples", "main", "run_cases"]

EXAMPLES_DIR = "src/python/examples"
TARGETS = ("serve", "up", "triton")
CLIENT_TIMEOUT_S = 180


def _run_one(case: Case, scripts: Path, run: Run, target: str) -> Outcome:
    if case.url == "fixed" and not run.fixed_ports:
        return Outcome(
            "skipped", "hard-codes localhost:8000/8001, which are in use (run under unshare -n)"
        )
    argv = [sys.executable, str(scripts / case.script), *case.args]
    if case.url != "fixed":
        argv += ["-u", run.http if case.url == "http" else run.grpc]
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=CLIENT_TIMEOUT_S,
            cwd=scripts,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        return Outcome("failed", f"did not finish within {CLIENT_TIMEOUT_S} s", out)
    deliberate = case.deliberate if target != "triton" else None
    return verdict(proc.returncode, proc.stdout + proc.stderr, case.pass_line, deliberate)


def run_cases(
    cases: tuple[Case, ...], scripts: Path, target: str, *, verbose: bool = True
) -> dict[str, Outcome]:
    """Each case against `target` (serve | up | triton): one server per mode, a fresh model
    repository each; the outcome by case name."""
    results: dict[str, Outcome] = {}
    for case in cases:
        if case.skip:
            results[case.name] = Outcome("skipped", case.skip)
    for name, mode in REPOSITORIES.items():
        mine = [c for c in cases if c.mode == name and not c.skip]
        missing = unsupported(target, mode.flags) if target != "triton" else None
        if not mine or missing is not None:
            for case in mine:
                results[case.name] = Outcome(
                    "unsupported", f"thaw {target} does not take {missing}"
                )
            continue
        with tempfile.TemporaryDirectory(prefix=f"thaw-client-examples-{target}-") as tmp:
            repo = write_repository(Path(tmp) / "models", mode.models)
            try:
                fixed = any(case.url == "fixed" for case in mine)
                with start(target, repo, mode, fixed_ports=fixed) as run:
                    for case in mine:
                        results[case.name] = outcome = _run_one(case, scripts, run, target)
                        if outcome.outcome == "failed":
                            log = run.log()[-1500:]
                            results[case.name] = Outcome(
                                "failed",
                                outcome.detail,
                                outcome.output + "\n--- server log:\n" + log,
                            )
                        if verbose:
                            print(
                                f"{target:6} {case.name:58} {outcome.outcome:7}",
                                outcome.detail[:160],
                                flush=True,
                            )
            except RuntimeError as exc:
                for case in mine:
                    results[case.name] = Outcome(
                        "failed", f"{target} did not start: {str(exc)[-300:]}"
                    )
    return results


def extract_examples(mirror: Path, ref: str, cases: tuple[Case, ...], root: Path) -> list[str]:
    """Write each case's script (and the examples' shared files) under `root`; the missing."""
    missing = []
    for script in dict.fromkeys(c.script for c in cases if not c.skip):
        content = git_show(mirror, ref, f"{EXAMPLES_DIR}/{script}")
        if content is None:
            missing.append(script)
        else:
            (root / script).write_bytes(content)
    return missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--mirror", type=Path, default=os.environ.get("TRITON_CLIENT_MIRROR", ""))
    parser.add_argument("--ref", default="HEAD")
    parser.add_argument("--server", choices=TARGETS, action="append", default=None)
    parser.add_argument("--only", nargs="*", default=None, help="example names (scripts) to run")
    parser.add_argument("--diff", action="store_true", help="print Triton-vs-Thaw output diffs")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    if str(args.mirror) in ("", ".") or git_show(args.mirror, args.ref, EXAMPLES_DIR) is None:
        print(
            "skipped: no Triton client mirror with src/python/examples (--mirror DIR or "
            "$TRITON_CLIENT_MIRROR, a bare git mirror of triton-inference-server/client)",
            file=sys.stderr,
        )
        return 0
    cases = tuple(
        c
        for c in CASES
        if not args.only or c.script.removesuffix(".py") in args.only or c.name in args.only
    )
    by_target: dict[str, dict[str, Outcome]] = {}
    with tempfile.TemporaryDirectory(prefix="thaw-client-examples-") as tmp:
        scripts = Path(tmp)
        missing = extract_examples(args.mirror, args.ref, cases, scripts)
        present = tuple(c for c in cases if c.script not in missing)
        for target in args.server or ["serve"]:
            by_target[target] = run_cases(present, scripts, target)
            for case in cases:
                if case.script in missing:
                    by_target[target][case.name] = Outcome(
                        "failed", f"{case.script} not in the mirror"
                    )
    print(results_table(cases, by_target))
    if args.diff and "triton" in by_target:
        for target in (t for t in by_target if t != "triton"):
            for case in cases:
                mine, theirs = by_target[target].get(case.name), by_target["triton"].get(case.name)
                if mine and theirs and mine.output and theirs.output:
                    lines = output_diff(theirs.output, mine.output)
                    if lines:
                        print(f"\n### {case.name}: triton vs thaw {target}\n" + "\n".join(lines))
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {t: {n: o.__dict__ for n, o in r.items()} for t, r in by_target.items()}, indent=1
            )
        )
    # Triton's own failures are the reference, not this run's verdict.
    thaw = [r for target, r in by_target.items() if target != "triton"]
    failed = any(o.outcome == "failed" for r in thaw for o in r.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
