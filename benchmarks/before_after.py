"""Run a benchmark against two trees of this repository in one run, interleaved; one table.

    python benchmarks/before_after.py --base REV [--head REV|worktree] [--rounds 2]
        [--tolerance 0.10] [--out DIR] -- serve_throughput [args...] [cold_start [args...]]

`--base` is checked out into a temporary `git worktree` (as is `--head` when it is a revision;
the default `worktree` is this checkout, uncommitted changes included); both are removed at
exit, Ctrl-C and SIGTERM included. Each benchmark then runs base, head, base, head, ...
(`--rounds` times each), so drift in the machine's load hits both sides alike.

Each tree runs its own copy of the benchmark script, with this process's Python (the same
virtualenv) and `PYTHONPATH=<tree>`, from `<tree>` as working directory: `PYTHONPATH` and the
working directory come before the editable install's finder (appended to `sys.meta_path`), and
every process the benchmarks and thaw start (`python -m thaw.cli`, the replica launcher's
`python -c`, the Python stub with its own `PYTHONPATH`) inherits both. Before any run a child
started the same way imports the product packages, and the run stops if one of them is loaded
from outside its tree.

Defaults added to the benchmark's arguments unless given: serve_throughput `--peers thaw`;
both `--repo <this checkout>/model_repository` (the same model files for both sides);
cold_start `--work <temp>/work-<side>` (a `--work W` given becomes `W/<side>`). `--json` is
always set by this script: every run's JSON and log are kept under `--out`.

Exit status: 0 unless a run failed (a report, not a gate); the tables come from
`before_after_report.py`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.before_after_report import EXTRACTORS, Readings, compare, render
from benchmarks.machine import machine_line

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = tuple(EXTRACTORS)  # serve_throughput, cold_start
PRODUCT_PACKAGES = ("thaw.cli", "runtime", "activator", "thawwire", "tritonconfig", "snapshotter")
_STOP_GRACE_S = 90.0  # a benchmark stops its servers on SIGINT; give it time to

_IMPORT_CHECK = """\
import importlib, json, sys
names = sys.argv[1:]
for name in names:
    importlib.import_module(name)
tops = {name.split(".")[0] for name in names}
print(json.dumps({m: getattr(mod, "__file__", None) for m, mod in list(sys.modules.items())
                  if m.split(".")[0] in tops}))
"""


@dataclass(frozen=True)
class Tree:
    """One side: its label (`base`, `head`), what it is (a revision or the worktree), where."""

    side: str
    spec: str
    path: Path
    commit: str


@dataclass(frozen=True)
class Job:
    """One benchmark to compare: its name and the arguments the user gave it."""

    name: str
    args: tuple[str, ...]


# ---- command line -------------------------------------------------------------------------------


def split_jobs(tokens: list[str]) -> list[Job]:
    """`serve_throughput a b cold_start c` (a `--` between them allowed) -> two jobs."""
    jobs: list[tuple[str, list[str]]] = []
    for index, token in enumerate(tokens):
        if token in BENCHMARKS:
            jobs.append((token, []))
        elif not jobs:
            raise ValueError(f"expected a benchmark name ({', '.join(BENCHMARKS)}), got {token!r}")
        elif token == "--" and index + 1 < len(tokens) and tokens[index + 1] in BENCHMARKS:
            continue
        else:
            jobs[-1][1].append(token)
    if not jobs:
        raise ValueError(f"name a benchmark after `--`: {', '.join(BENCHMARKS)}")
    return [Job(name, tuple(args)) for name, args in jobs]


def _has_option(args: tuple[str, ...] | list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def _option_value(args: list[str], flag: str) -> tuple[list[str], str | None]:
    """`args` without `flag VALUE` / `flag=VALUE`, and the value (None if absent)."""
    rest: list[str] = []
    value = None
    tokens = iter(args)
    for token in tokens:
        if token == flag:
            value = next(tokens, None)
        elif token.startswith(flag + "="):
            value = token.split("=", 1)[1]
        else:
            rest.append(token)
    return rest, value


def benchmark_argv(job: Job, tree: Tree, json_path: Path, scratch: Path) -> list[str]:
    """The benchmark's arguments for one run of `tree`, with this script's defaults added."""
    args = list(job.args)
    if _has_option(args, "--json"):
        raise ValueError("--json is set by before_after.py (each run's JSON is kept in --out)")
    if job.name == "serve_throughput" and not _has_option(args, "--peers"):
        args += ["--peers", "thaw"]
    if not _has_option(args, "--repo"):
        args += ["--repo", str(ROOT / "model_repository")]
    if job.name == "cold_start":
        args, work = _option_value(args, "--work")
        base = Path(work) if work else scratch
        args += ["--work", str(base / f"work-{tree.side}")]
    return [*args, "--json", str(json_path)]


def _parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[Job]]:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        usage="%(prog)s --base REV [--head REV|worktree] [--rounds N] [--tolerance F] "
        "-- serve_throughput [args...] [cold_start [args...]]",
    )
    parser.add_argument("--base", required=True, help="revision measured as `before`")
    parser.add_argument(
        "--head", default="worktree", help="revision measured as `after` (default: this checkout)"
    )
    parser.add_argument("--rounds", type=int, default=2, help="runs of each side, interleaved")
    parser.add_argument(
        "--tolerance",
        type=float,
        default=0.10,
        help="head/base within this of 1 is `within noise` even when the ranges do not "
        "overlap (default 0.10)",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="where runs' JSON and logs are kept "
        "(default .bench/before_after/<UTC time>)",
    )  # fmt: skip
    if "--" not in argv:
        parser.parse_args(argv)  # --help prints the help and exits 0; a flag error is said first
        parser.error("name the benchmark after `--`, e.g. `-- serve_throughput --duration-s 2`")
    split = argv.index("--")
    args = parser.parse_args(argv[:split])
    if args.rounds < 1 or not 0 <= args.tolerance < 1:
        parser.error("--rounds >= 1, --tolerance in [0, 1)")
    try:
        jobs = split_jobs(argv[split + 1 :])
    except ValueError as exc:
        parser.error(str(exc))
    return args, jobs


# ---- trees --------------------------------------------------------------------------------------


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


@contextlib.contextmanager
def checked_out(side: str, spec: str, scratch: Path) -> Iterator[Tree]:
    """`spec` as a tree: this checkout for `worktree`, else a temporary detached worktree."""
    if spec == "worktree":
        dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
        commit = _git("rev-parse", "--short", "HEAD") + (" + uncommitted changes" if dirty else "")
        yield Tree(side, spec, ROOT, commit)
        return
    commit = _git("rev-parse", "--verify", "--short", f"{spec}^{{commit}}")
    path = scratch / side
    _git("worktree", "add", "--detach", "--quiet", str(path), commit)
    try:
        yield Tree(side, spec, path, commit)
    finally:
        try:
            _git("worktree", "remove", "--force", str(path))
        except subprocess.CalledProcessError:
            shutil.rmtree(path, ignore_errors=True)
            _git("worktree", "prune")


def tree_env(tree: Tree) -> dict[str, str]:
    """This environment with `PYTHONPATH=<tree>` (and nothing else on it)."""
    return {**os.environ, "PYTHONPATH": str(tree.path)}


def foreign_modules(tree: Path, files: dict[str, str | None]) -> dict[str, str]:
    """Modules of `files` (name -> `__file__`) loaded from outside `tree`."""
    root = tree.resolve()
    return {
        name: path
        for name, path in files.items()
        if path is not None and not Path(path).resolve().is_relative_to(root)
    }


def check_tree_code(tree: Tree) -> None:
    """Start a child as the benchmarks start thaw; fail unless it imports `tree`'s code."""
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_CHECK, *PRODUCT_PACKAGES],
        cwd=tree.path,
        env=tree_env(tree),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{tree.side} ({tree.spec}) does not import: {proc.stderr[-2000:]}")
    foreign = foreign_modules(tree.path, json.loads(proc.stdout.splitlines()[-1]))
    if foreign:
        raise RuntimeError(f"{tree.side} ({tree.spec}) loads code from elsewhere: {foreign}")


# ---- runs ---------------------------------------------------------------------------------------


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT the benchmark's process group (it stops its servers), then SIGKILL it."""
    for sig, wait_s in ((signal.SIGINT, _STOP_GRACE_S), (signal.SIGKILL, 10.0)):
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait_s)


def run_once(job: Job, tree: Tree, index: int, out: Path, scratch: Path) -> Any:
    """One run of `job` on `tree`; its JSON document, or RuntimeError with the log's tail."""
    stem = f"{job.name}-{index}-{tree.side}"
    json_path, log_path = out / f"{stem}.json", out / f"{stem}.log"
    script = tree.path / "benchmarks" / f"{job.name}.py"
    argv = [sys.executable, str(script), *benchmark_argv(job, tree, json_path, scratch)]
    print(f"-- {stem}: {' '.join(argv[1:])}", flush=True)
    started = time.monotonic()
    with log_path.open("wb") as log:
        # Own process group: Ctrl-C reaches this script, which stops the run in order.
        proc = subprocess.Popen(
            argv,
            cwd=tree.path,
            env=tree_env(tree),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = proc.wait()
        finally:
            _stop(proc)
    print(f"   exit {code} after {time.monotonic() - started:.0f} s; log {log_path}", flush=True)
    if code != 0 or not json_path.is_file():
        tail = log_path.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{stem} failed (exit {code}):\n{tail}")
    return json.loads(json_path.read_text())


def _interruptible() -> None:
    """SIGINT and SIGTERM raise KeyboardInterrupt here (the trees are removed on the way out).

    SIGINT gets Python's handler even when this process was started with it ignored (a
    background job of a script): a benchmark started from here then has SIGINT at its default
    again (exec resets handlers, not "ignored"), so `_stop`'s SIGINT stops it in order."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, handler)


def main(argv: list[str] | None = None) -> int:
    args, jobs = _parse_args(sys.argv[1:] if argv is None else argv)
    out = args.out or ROOT / ".bench" / "before_after" / time.strftime("%Y%m%dT%H%M%SZ",
                                                                     time.gmtime())  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    _interruptible()
    runs: dict[str, dict[str, list[Readings]]] = {j.name: {"base": [], "head": []} for j in jobs}
    failure, code = "", 1
    load_start = os.getloadavg()[0]
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="before-after-")))
        base = stack.enter_context(checked_out("base", args.base, scratch))
        head = stack.enter_context(checked_out("head", args.head, scratch))
        header = f"base {base.spec} ({base.commit}), head {head.spec} ({head.commit})"
        print(header, flush=True)
        try:
            for tree in (base, head):
                check_tree_code(tree)
            for job in jobs:
                for index in range(args.rounds):
                    for tree in (base, head):
                        document = run_once(job, tree, index, out, scratch)
                        runs[job.name][tree.side].append(EXTRACTORS[job.name](document))
        except RuntimeError as exc:
            failure = str(exc)
        except KeyboardInterrupt:
            failure, code = "interrupted (SIGINT or SIGTERM)", 130
    for job in jobs:
        sides = runs[job.name]
        print(
            f"\n## {job.name} {' '.join(job.args)}\n\n{header}; rounds: base "
            f"{len(sides['base'])}, head {len(sides['head'])}, interleaved; tolerance "
            f"{args.tolerance:.0%}\n"
        )
        print(render(compare(sides["base"], sides["head"], args.tolerance)))
    print(f"\n{machine_line(load_start, os.getloadavg()[0])}\nruns' JSON and logs: {out}")
    if failure:
        print(f"\nStopped early; the tables hold the runs before.\n{failure}", file=sys.stderr)
        return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
