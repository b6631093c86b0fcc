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
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.conformance.qa_checkout import git_show, port_in_use
from tests.conformance.qa_servers import unsupported
from tests.fixtures.client_example_models import ALL_MODELS, EXPLICIT_MODELS, write_repository
from tests.fixtures.serve_process import ServeProcess, free_port
from tests.fixtures.up_process import UpProcess

__all__ = [
    "CASES",
    "REPOSITORIES",
    "Case",
    "Outcome",
    "Run",
    "ServerMode",
    "extract_examples",
    "main",
    "mask",
    "output_diff",
    "results_table",
    "run_cases",
    "verdict",
]

EXAMPLES_DIR = "src/python/examples"
TARGETS = ("serve", "up", "triton")
TRITON_PORTS = (8000, 8001, 8002)
CLIENT_TIMEOUT_S = 180

_NO_CUDA = "CUDA shared memory: needs a GPU and tritonclient's cuda_shared_memory (cuda-python)"
_NO_IMAGE = (
    "imports Pillow (not installed here) to read an image; test.sh checks the class it prints "
    "(VULTURE), which takes the real inception/densenet weights (downloaded)"
)


@dataclass(frozen=True)
class Case:
    """One example run: its script, its arguments, which server it needs.

    `url`: the port `-u` names (http | grpc), or "fixed" for a script that hard-codes
    localhost:8000/8001. `mode`: the server it runs against, a key of REPOSITORIES.
    `pass_line`: the line the script prints on success, checked when set. `skip`: why it cannot
    run on this machine. `deliberate`: (a line of Thaw's failing output, why Thaw answers so on
    purpose): such a failure is reported `deliberate`, not `failed`; any other still fails."""

    name: str
    script: str
    args: tuple[str, ...] = ()
    url: str = "http"
    mode: str = "default"
    pass_line: str | None = None
    skip: str | None = None
    deliberate: tuple[str, str] | None = None


def _case(script: str, *args: str, **kw: object) -> Case:
    name = " ".join((script, *[a for a in args if a != "-v"]))
    url = str(kw.pop("url", None) or ("grpc" if "grpc" in script else "http"))
    return Case(name, f"{script}.py", args, url, **kw)  # type: ignore[arg-type]


CASES: tuple[Case, ...] = (
    _case("simple_http_health_metadata", "-v"),
    _case("simple_http_infer_client", "-v"),
    _case(
        "simple_http_infer_client",
        "--request-compression-algorithm",
        "gzip",
        "--response-compression-algorithm",
        "deflate",
    ),
    _case("simple_http_aio_infer_client", "-v", pass_line="PASS: infer"),
    _case("simple_http_async_infer_client", "-v"),
    _case("simple_http_string_infer_client", "-v", pass_line="PASS: string"),
    _case("simple_http_shm_client", "-v", pass_line="PASS: system shared memory"),
    _case("simple_http_shm_string_client", "-v", pass_line="PASS: system shared memory"),
    _case("simple_http_sequence_sync_infer_client", "-v", pass_line="PASS: Sequence"),
    _case("simple_http_sequence_sync_infer_client", "-v", "-d", pass_line="PASS: Sequence"),
    _case("reuse_infer_objects_client", "-v", "-i", "http"),
    _case("reuse_infer_objects_client", "-v", "-i", "grpc", url="grpc"),
    _case(
        "simple_http_model_control",
        "-v",
        mode="http-model-control",
        pass_line="PASS: model control",
    ),
    _case("simple_grpc_health_metadata", "-v"),
    _case("simple_grpc_infer_client", "-v", pass_line="PASS: infer"),
    _case("simple_grpc_infer_client", "-C", "gzip", pass_line="PASS: infer"),
    _case(
        "simple_grpc_infer_client",
        "-v",
        "-C",
        "deflate",
        mode="grpc-compression",
        pass_line="PASS: infer",
    ),
    _case("simple_grpc_aio_infer_client", "-v", pass_line="PASS: grpc aio infer"),
    _case("simple_grpc_async_infer_client", "-v", pass_line="PASS: Async infer"),
    _case("simple_grpc_string_infer_client", "-v", pass_line="PASS: string"),
    _case("simple_grpc_shm_client", "-v", pass_line="PASS: system shared memory"),
    _case("simple_grpc_shm_string_client", "-v", pass_line="PASS: system shared memory"),
    _case("simple_grpc_sequence_sync_infer_client", "-v", pass_line="PASS: Sequence"),
    _case("simple_grpc_sequence_sync_infer_client", "-v", "-d", pass_line="PASS: Sequence"),
    _case("simple_grpc_sequence_stream_infer_client", "-v", pass_line="PASS: Sequence"),
    _case("simple_grpc_sequence_stream_infer_client", "-v", "-d", pass_line="PASS: Sequence"),
    _case(
        "simple_grpc_aio_sequence_stream_infer_client",
        "-v",
        pass_line="PASS: grpc aio sequence stream",
    ),
    _case(
        "simple_grpc_aio_sequence_stream_infer_client",
        "-v",
        "-d",
        pass_line="PASS: grpc aio sequence stream",
    ),
    _case("simple_grpc_keepalive_client", "-v", pass_line="PASS: KeepAlive"),
    _case("simple_grpc_custom_args_client", "-v", pass_line="PASS: CustomArgs"),
    _case("simple_grpc_custom_repeat", "-v", pass_line="PASS: Decoupled API"),
    _case(
        "simple_grpc_model_control",
        "-v",
        mode="grpc-model-control",
        pass_line="PASS: model control",
        deliberate=(
            "FAILED: expected status 'StatusCode.INTERNAL' for oversized file parameter, got "
            "status='StatusCode.INVALID_ARGUMENT'",
            "client HEAD (after 2.51) wants INTERNAL for a 256-byte `file:` name; Thaw's "
            "INVALID_ARGUMENT is on purpose (docs/triton-http-parity.md)",
        ),
    ),
    _case("grpc_explicit_byte_content_client", "-v", pass_line="PASS: explicit string"),
    _case("grpc_explicit_int_content_client", "-v", pass_line="PASS: explicit int"),
    _case("grpc_explicit_int8_content_client", "-v", pass_line="PASS: explicit int8"),
    _case("grpc_client", "-v", pass_line="PASS"),
    _case("memory_growth_test", "-i", "http", "-r", "20", url="fixed"),
    _case("memory_growth_test", "-i", "grpc", "-r", "20", url="fixed"),
    _case("simple_http_cudashm_client", "-v", skip=_NO_CUDA),
    _case("simple_grpc_cudashm_client", "-v", skip=_NO_CUDA),
    _case("image_client", skip=_NO_IMAGE),
    _case("grpc_image_client", skip=_NO_IMAGE),
    _case("ensemble_image_client", skip=_NO_IMAGE + "; and a preprocessing (DALI) ensemble"),
)


@dataclass(frozen=True)
class ServerMode:
    """A server the examples run against: its models, whether it is in explicit model-control
    mode, and tritonserver flags test.sh gives that start (every target gets them)."""

    models: tuple[str, ...]
    explicit: bool = False
    flags: tuple[str, ...] = ()


# The model-control examples count the repository index: 7 models over HTTP, 8 over gRPC (the
# repositories of qa/L0_http and qa/L0_grpc; the eighth there is inception_graphdef).
REPOSITORIES: dict[str, ServerMode] = {
    "default": ServerMode(ALL_MODELS),
    "http-model-control": ServerMode(EXPLICIT_MODELS, explicit=True),
    "grpc-model-control": ServerMode((*EXPLICIT_MODELS, "inception_graphdef"), explicit=True),
    # qa/L0_grpc's start for `simple_grpc_infer_client.py -C deflate`.
    "grpc-compression": ServerMode(
        ("simple",), flags=("--grpc-infer-response-compression-level=high",)
    ),
}


@dataclass(frozen=True)
class Outcome:
    """One example on one target: passed | failed | skipped, a one-line detail, its output."""

    outcome: str
    detail: str
    output: str = ""


def verdict(
    returncode: int,
    output: str,
    pass_line: str | None,
    deliberate: tuple[str, str] | None = None,
) -> Outcome:
    """An example's outcome from its exit status and output (stdout and stderr): passed,
    failed, or deliberate (a failure printing `deliberate`'s line: a difference kept on
    purpose)."""
    lines = output.strip().splitlines()
    tail = " | ".join(lines[-3:])
    if returncode != 0:
        failed = Outcome("failed", f"exit {returncode}: {tail}", output)
    elif pass_line is not None and not any(line.strip() == pass_line for line in lines):
        failed = Outcome("failed", f"exit 0 without {pass_line!r}: {tail}", output)
    else:
        return Outcome("passed", pass_line or "exit 0", output)
    if deliberate is not None and any(line.strip() == deliberate[0] for line in lines):
        return Outcome("deliberate", deliberate[1], output)
    return failed


_MASKS = (
    (re.compile(r"(localhost|127\.0\.0\.1):\d+"), r"\1:PORT"),
    # Timings and the clock: statistics' `ns` and `last_inference` in JSON, dicts and protobuf.
    (re.compile(r"""(["']?\b(?:ns|last_inference)["']?:\s?)\d+"""), r"\1N"),
    # Headers any HTTP server may add (aiohttp's Date and Server), in tritonclient's dict reprs.
    (re.compile(r""", '(?:Date|Server)': '[^']*'"""), ""),
    (re.compile(r"""'(?:Date|Server)': '[^']*', """), ""),
    (re.compile(r'(raw_output_contents: )".{200,}"'), r'\1"..."'),
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "UUID"),
    (re.compile(r"0x[0-9a-f]{6,}"), "0xADDR"),
    (re.compile(r"(?i)^(date|server): .*$", re.M), r"\1: ..."),
)


def mask(output: str) -> str:
    """`output` with what differs between any two runs (ports, uuids, addresses, dates) masked."""
    for pattern, replacement in _MASKS:
        output = pattern.sub(replacement, output)
    return output


def output_diff(triton: str, thaw: str, *, context: int = 0) -> list[str]:
    """The unified diff of two runs' masked outputs, Triton's as the `-` side."""
    return list(
        difflib.unified_diff(
            mask(triton).splitlines(),
            mask(thaw).splitlines(),
            "triton",
            "thaw",
            n=context,
            lineterm="",
        )
    )


@dataclass(frozen=True)
class Run:
    """A started server: its HTTP and gRPC `HOST:PORT`, its log so far, whether it took
    Triton's fixed ports."""

    http: str
    grpc: str
    log: Callable[[], str]
    fixed_ports: bool


def _wait_http(url: str, path: str, timeout_s: float, alive: Callable[[], bool]) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive():
            raise RuntimeError("exited before it was ready")
        try:
            with urllib.request.urlopen(url + path, timeout=5) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{path} not 200 within {timeout_s:.0f} s")


def _ports(fixed: bool) -> tuple[int, int, int, bool]:
    """Triton's ports when `fixed` (an example hard-codes them) and they are free, else free
    ones; and whether they are Triton's."""
    if fixed and not any(port_in_use(p) for p in TRITON_PORTS):
        return (*TRITON_PORTS, True)
    return free_port(), free_port(), free_port(), False


@contextmanager
def _thaw(kind: str, repo: Path, mode: ServerMode, fixed_ports: bool) -> Iterator[Run]:
    http, grpc, metrics, fixed = _ports(fixed_ports)
    args = ["--port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    control = "explicit" if mode.explicit else "none"
    args += ["--log-level", "warning", "--model-control-mode", control, *mode.flags]
    server: ServeProcess | UpProcess
    log: Callable[[], str]
    if kind == "up":
        server = UpProcess(repo, *args, "--warm-pool", "1", "--no-image-build")
        log = server.log
    else:
        server = ServeProcess(repo, *args)
        log = server.logs
        try:
            server.wait_ready(timeout_s=180)
        except RuntimeError:
            server.stop()
            raise
    try:
        yield Run(f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", log, fixed)
    finally:
        server.stop()


@contextmanager
def _triton(repo: Path, mode: ServerMode, fixed_ports: bool) -> Iterator[Run]:
    from benchmarks.peers import PeerError, TritonPeer

    peer = TritonPeer()
    try:
        peer.prepare()
    except PeerError as exc:
        raise RuntimeError(f"Triton is not installed here: {exc}") from exc
    http, grpc, metrics, fixed = _ports(fixed_ports)
    argv = [
        str(peer.server_dir / "bin" / "tritonserver"),
        f"--model-repository={repo}",
        f"--backend-directory={peer.server_dir / 'backends'}",
        f"--http-port={http}", f"--grpc-port={grpc}", f"--metrics-port={metrics}",
        "--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1",
        f"--model-control-mode={'explicit' if mode.explicit else 'none'}",
        *mode.flags,
    ]  # fmt: skip
    env = {**os.environ, "PATH": f"{peer.venv / 'bin'}:{os.environ.get('PATH', '')}"}
    env["LD_LIBRARY_PATH"] = str(peer.libs)
    log_path = Path(tempfile.mkstemp(prefix="triton-examples-", suffix=".log")[1])
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )

        def stop() -> None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)

        def read_log() -> str:
            return log_path.read_text(errors="replace")

        try:
            _wait_http(
                f"http://127.0.0.1:{http}", "/v2/health/ready", 180, lambda: proc.poll() is None
            )
        except RuntimeError as exc:
            stop()
            raise RuntimeError(f"tritonserver: {exc}: {read_log()[-2000:]}") from exc
        try:
            yield Run(f"127.0.0.1:{http}", f"127.0.0.1:{grpc}", read_log, fixed)
        finally:
            stop()


def _start(
    target: str, repo: Path, mode: ServerMode, *, fixed_ports: bool
) -> AbstractContextManager[Run]:
    if target == "triton":
        return _triton(repo, mode, fixed_ports)
    return _thaw(target, repo, mode, fixed_ports)


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
                with _start(target, repo, mode, fixed_ports=fixed) as run:
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


def results_table(cases: tuple[Case, ...], by_target: dict[str, dict[str, Outcome]]) -> str:
    """A markdown table: one row per example, one column per target, skip reasons last."""
    targets = list(by_target)
    head = ["example", *(f"thaw {t}" if t != "triton" else "Triton 2.51" for t in targets), "note"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for case in cases:
        outcomes = [by_target[t].get(case.name) for t in targets]
        cells = [o.outcome if o else "-" for o in outcomes]
        notes = {o.detail for o in outcomes if o and o.outcome != "passed"}
        rows.append(f"| `{case.name}` | " + " | ".join(cells) + f" | {'; '.join(sorted(notes))} |")
    return "\n".join(rows)


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
