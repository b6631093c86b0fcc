"""Run Triton's perf_analyzer (the C++ load generator) against `thaw serve`, through `thaw up`
(every model at zero: the first run of each model wakes it) and against real Triton 2.51, on
one model repository, in its common modes (tests/conformance/perf_analyzer_cases.py).

    .venv/bin/python -m tests.conformance.perf_analyzer_runs [--server serve|up|triton ...]
        [--only SUBSTRING ...] [--json FILE]

perf_analyzer is prepared by `python -m benchmarks.perf_analyzer` (tritonclient's wheel,
libb64, libcudart, under `.bench/perf_analyzer`); without it this says so and exits 0. Each
run is short (500 ms windows, at most 3, no stability demand: this checks that every mode
works, not how fast) and passes when perf_analyzer exits 0 with a throughput line, printed no
request error, and (`-f`) wrote its CSV. Server-side warnings perf_analyzer prints (metrics it
cannot parse) are reported beside the verdict.

Exit status: 1 when a run failed on `thaw serve` or `thaw up`; Triton's failures are reported,
not counted.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.perf_analyzer import PerfAnalyzer, installed
from tests.conformance.client_example_cases import ServerMode
from tests.conformance.client_example_results import Outcome
from tests.conformance.client_example_servers import Run, start
from tests.conformance.perf_analyzer_cases import CASES, STRINGS_JSON, Case
from tests.fixtures.perf_analyzer_models import PYTHON_MODELS, write_repository

__all__ = ["main", "results_table", "run_cases", "verdict"]

TARGETS = ("serve", "up", "triton")
RUN_TIMEOUT_S = 120
_COMMON = ("--measurement-interval", "500", "--max-trials", "3", "--stability-percentage", "999")
_THROUGHPUT = re.compile(r"^(Concurrency|Request Rate): .*throughput: ", re.M)
_ERRORS = re.compile(r"(?im)^.*\b(error|failed to)\b.*$")
_WARNINGS = re.compile(r"(?m)^WARNING: (.*)$")


def _argv(case: Case, run: Run, metrics: str, tmp: Path) -> list[str]:
    url = run.http if case.protocol == "http" else run.grpc
    fill = {"http": run.http, "grpc": run.grpc, "metrics": metrics, "tmp": str(tmp)}
    argv = ["-m", case.model, "-i", case.protocol, "-u", url, *_COMMON]
    argv += [arg.format(**fill) for arg in case.args]
    if case.csv:
        argv += ["-f", str(_csv_path(case, tmp))]
    return argv


def _csv_path(case: Case, tmp: Path) -> Path:
    return tmp / (re.sub(r"\W+", "_", case.name).strip("_") + ".csv")


def _csv_rows(path: Path) -> str | None:
    """None when `path` is perf_analyzer's CSV (a header and a row per load level), else why not."""
    if not path.is_file():
        return "wrote no CSV"
    rows = list(csv.reader(path.read_text().splitlines()))
    if len(rows) < 2 or not rows[0] or rows[0][0] not in ("Concurrency", "Request Rate"):
        return f"CSV is not perf_analyzer's: {rows[:2]}"
    return None


def verdict(
    returncode: int,
    output: str,
    csv_problem: str | None = None,
    *,
    refused: bool = False,
    periodic: bool = False,
) -> Outcome:
    """A run's outcome from its exit status and output (stdout and stderr). `refused`: the
    run passes when perf_analyzer stops with an error, whose first line becomes the detail.
    `periodic` (--periodic-concurrency-range) prints no throughput line: exit 0 suffices."""
    errors = [m.group(0).strip() for m in _ERRORS.finditer(output)]
    if refused:
        lines = [line.strip() for line in output.splitlines() if line.strip()]
        if returncode != 0 and lines:
            return Outcome("passed", f"refused: {(errors or lines[-1:])[0][:200]}", output)
        return Outcome("failed", f"exit {returncode} where an error was expected", output)
    warnings = sorted(set(_WARNINGS.findall(output)))
    note = ("warnings: " + "; ".join(warnings)) if warnings else ""
    if returncode != 0 or errors or not (periodic or _THROUGHPUT.search(output)):
        tail = errors[:2] or output.strip().splitlines()[-2:]
        return Outcome("failed", f"exit {returncode}: " + " | ".join(tail)[:300], output)
    if csv_problem is not None:
        return Outcome("failed", csv_problem, output)
    return Outcome("passed", note, output)


def run_cases(
    pa: PerfAnalyzer, cases: tuple[Case, ...], target: str, *, verbose: bool = True
) -> dict[str, Outcome]:
    """Every case against one `target` server (serve | up | triton); outcomes by case name."""
    results: dict[str, Outcome] = {}
    onnx = target != "triton"
    mine = [c for c in cases if onnx or not c.onnx]
    for case in cases:
        if case not in mine:
            results[case.name] = Outcome("skipped", "Triton's pip build has no onnxruntime backend")
    models = (*PYTHON_MODELS, "simple_batched", *(("onnx_add",) if onnx else ()))
    with tempfile.TemporaryDirectory(prefix=f"thaw-perf-analyzer-{target}-") as tmp_name:
        tmp = Path(tmp_name)
        repo = write_repository(tmp / "models", onnx=onnx)
        (tmp / "strings.json").write_text(json.dumps(STRINGS_JSON))
        (tmp / "intervals.txt").write_text("2000\n5000\n3000\n")
        try:
            with start(target, repo, ServerMode(models), fixed_ports=False) as run:
                for case in mine:
                    results[case.name] = _run_one(pa, case, run, run.metrics, tmp)
                    if verbose:
                        o = results[case.name]
                        print(
                            f"{target:6} {case.name:58} {o.outcome:7}", o.detail[:200], flush=True
                        )
        except RuntimeError as exc:
            for case in mine:
                results[case.name] = Outcome("failed", f"{target} did not start: {str(exc)[-300:]}")
    return results


def _run_one(pa: PerfAnalyzer, case: Case, run: Run, metrics: str, tmp: Path) -> Outcome:
    try:
        proc = pa.run(_argv(case, run, metrics, tmp), timeout_s=RUN_TIMEOUT_S, cwd=tmp)
    except subprocess.TimeoutExpired:
        return Outcome("failed", f"did not finish within {RUN_TIMEOUT_S} s")
    output = proc.stdout + proc.stderr
    csv_problem = _csv_rows(_csv_path(case, tmp)) if case.csv else None
    periodic = "--periodic-concurrency-range" in case.args
    outcome = verdict(proc.returncode, output, csv_problem, refused=case.refused, periodic=periodic)
    if outcome.outcome == "failed":
        return Outcome("failed", outcome.detail, output + "\n--- server log:\n" + run.log()[-1500:])
    return outcome


def results_table(cases: tuple[Case, ...], by_target: dict[str, dict[str, Outcome]]) -> str:
    """A markdown table: one row per run, one column per target, notes last."""
    targets = list(by_target)
    head = [
        "perf_analyzer run",
        *(f"thaw {t}" if t != "triton" else "Triton 2.51" for t in targets),
    ]
    rows = ["| " + " | ".join([*head, "note"]) + " |", "|" + "---|" * (len(head) + 1)]
    for case in cases:
        outcomes = [by_target[t].get(case.name) for t in targets]
        cells = [o.outcome if o else "-" for o in outcomes]
        notes = {
            f"{t}: {o.detail}" for t, o in zip(targets, outcomes, strict=True) if o and o.detail
        }
        rows.append(f"| `{case.name}` | " + " | ".join(cells) + f" | {'; '.join(sorted(notes))} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--server", choices=TARGETS, action="append", default=None)
    parser.add_argument("--only", nargs="*", default=None, help="substrings of case names")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--verbose", action="store_true", help="print failed runs' output")
    args = parser.parse_args(argv)
    pa = installed()
    if pa is None:
        print(
            "skipped: perf_analyzer is not prepared here (python -m benchmarks.perf_analyzer "
            "lays it out under .bench/perf_analyzer)",
            file=sys.stderr,
        )
        return 0
    cases = tuple(c for c in CASES if not args.only or any(s in c.name for s in args.only))
    by_target = {t: run_cases(pa, cases, t) for t in args.server or list(TARGETS)}
    print(results_table(cases, by_target))
    if args.verbose:
        for target, results in by_target.items():
            for name, o in results.items():
                if o.outcome == "failed":
                    print(f"\n### {target}: {name}\n{o.output[-3000:]}")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {t: {n: o.__dict__ for n, o in r.items()} for t, r in by_target.items()}, indent=1
            )
        )
    thaw = [r for target, r in by_target.items() if target != "triton"]
    return 1 if any(o.outcome == "failed" for r in thaw for o in r.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
