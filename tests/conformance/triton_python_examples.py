"""Run Triton python_backend's own `examples/`, unchanged, against `thaw serve` (or, with
`--server up`, through `thaw up`: every model at zero, woken by the example's first request);
report each.

    .venv/bin/python -m tests.conformance.triton_python_examples [--mirror GIT_DIR] [--ref HEAD]
        [--server serve|up]

Triton's examples are never part of this project: they are read at run time from a local git
mirror of triton-inference-server/python_backend (`--mirror`, default
`$TRITON_PYTHON_BACKEND_MIRROR`) into a temporary directory, laid out as each example's README
says, served by `thaw serve` on Triton's ports (the clients hard-code localhost:8000, 8001 for
gRPC and 8002 for metrics, so examples run one after another) and checked by running the
example's own client, which exits 0 on success. The run is skipped (exit 0) without a mirror.
An example whose client needs gRPC or the metrics port is skipped while `thaw serve` has no
`--grpc-port` / `--metrics-port`. Exit status: 0 when no example failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.fixtures.serve_process import ServeProcess
from tests.fixtures.up_process import UpProcess

_PROJECT_ROOT = Path(__file__).resolve().parents[2]
PORTS = (8000, 8001, 8002)


@dataclass(frozen=True)
class Example:
    """One example: mirror path -> repository path, its client, what the client needs."""

    name: str
    files: tuple[tuple[str, str], ...]
    client: str
    grpc: bool = False
    metrics_port: bool = False


def _model(src_dir: str, model: str, py: str, config: str | None) -> tuple[tuple[str, str], ...]:
    files = [(f"examples/{src_dir}/{py}", f"{model}/1/model.py")]
    if config is not None:
        files.append((f"examples/{src_dir}/{config}", f"{model}/config.pbtxt"))
    return tuple(files)


_ADD_SUB = _model("add_sub", "add_sub", "model.py", "config.pbtxt")
_PYTORCH = _model("pytorch", "pytorch", "model.py", "config.pbtxt")
_SQUARE = _model("decoupled", "square_int32", "square_model.py", "square_config.pbtxt")

EXAMPLES = (
    Example("add_sub", _ADD_SUB, "examples/add_sub/client.py"),
    Example("pytorch", _PYTORCH, "examples/pytorch/client.py"),
    Example(
        "auto_complete",
        _model("auto_complete", "nobatch_auto_complete", "nobatch_model.py", None)
        + _model("auto_complete", "batch_auto_complete", "batch_model.py", None),
        "examples/auto_complete/client.py",
    ),
    Example(
        "bls_sync",
        _ADD_SUB + _PYTORCH + _model("bls", "bls_sync", "sync_model.py", "sync_config.pbtxt"),
        "examples/bls/sync_client.py",
    ),
    Example(
        "bls_async",
        _ADD_SUB + _PYTORCH + _model("bls", "bls_async", "async_model.py", "async_config.pbtxt"),
        "examples/bls/async_client.py",
    ),
    Example(
        "bls_decoupled_sync",
        _SQUARE
        + _model("bls_decoupled", "bls_decoupled_sync", "sync_model.py", "sync_config.pbtxt"),
        "examples/bls_decoupled/sync_client.py",
    ),
    Example(
        "bls_decoupled_async",
        _SQUARE
        + _model("bls_decoupled", "bls_decoupled_async", "async_model.py", "async_config.pbtxt"),
        "examples/bls_decoupled/async_client.py",
    ),
    Example(
        "decoupled_repeat",
        _model("decoupled", "repeat_int32", "repeat_model.py", "repeat_config.pbtxt"),
        "examples/decoupled/repeat_client.py",
        grpc=True,
    ),
    Example("decoupled_square", _SQUARE, "examples/decoupled/square_client.py", grpc=True),
    Example(
        "custom_metrics",
        _model("custom_metrics", "custom_metrics", "model.py", "config.pbtxt"),
        "examples/custom_metrics/client.py",
        metrics_port=True,
    ),
)


def _git_show(mirror: Path, ref: str, path: str) -> bytes | None:
    proc = subprocess.run(
        ["git", "-C", str(mirror), "show", f"{ref}:{path}"], capture_output=True, check=False
    )
    return proc.stdout if proc.returncode == 0 else None


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _serve_flags() -> set[str]:
    """The `--...` flags this `thaw serve` has (gRPC and the metrics port may not exist yet)."""
    out = subprocess.run(
        [sys.executable, "-m", "thaw.cli", "serve", "--help"],
        capture_output=True, text=True, check=False, cwd=_PROJECT_ROOT,
    ).stdout  # fmt: skip
    return {word.rstrip(",=") for word in out.split() if word.startswith("--")}


def run_example(
    example: Example, mirror: Path, ref: str, flags: set[str], server_kind: str = "serve"
) -> tuple[str, str]:
    """(outcome, detail) for one example: passed | failed | skipped."""
    if example.grpc and "--grpc-port" not in flags:
        return "skipped", "its client uses gRPC; `thaw serve` has no --grpc-port yet"
    if example.metrics_port and "--metrics-port" not in flags:
        return "skipped", "its client reads localhost:8002; `thaw serve` has no --metrics-port yet"
    busy = [p for p in PORTS if _port_in_use(p)]
    if busy:
        return "failed", f"port(s) {busy} are in use: the clients hard-code Triton's ports"
    with tempfile.TemporaryDirectory(prefix=f"thaw-pyex-{example.name}-") as tmp:
        root = Path(tmp)
        repo = root / "models"
        for src, dst in (*example.files, (example.client, "client.py")):
            content = _git_show(mirror, ref, src)
            if content is None:
                return "failed", f"{src} is not in the mirror at {ref}"
            target = (root if dst == "client.py" else repo) / dst
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        args = ["--log-level", "warning"]
        if "--grpc-port" in flags:
            args += ["--grpc-port", "8001"]
        if "--metrics-port" in flags:
            args += ["--metrics-port", "8002"]
        try:
            server: ServeProcess | UpProcess = (
                _up_on_8000(repo, args) if server_kind == "up" else _serve_on_8000(repo, args)
            )
        except RuntimeError as exc:
            return "failed", f"thaw {server_kind} did not become ready: {str(exc)[-300:]}"
        try:
            proc = subprocess.run(
                [sys.executable, str(root / "client.py")],
                capture_output=True, text=True, timeout=180, cwd=root, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return "failed", "the client did not finish within 180 s"
        finally:
            server.stop()
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        if proc.returncode == 0:
            return "passed", " | ".join(tail)
        log = server.log_path.read_text(errors="replace").strip().splitlines()[-5:]
        return "failed", " | ".join(tail + ["server: " + line for line in log])


def _serve_on_8000(repo: Path, args: list[str]) -> ServeProcess:
    server = ServeProcess(repo, *args, "--port", "8000")  # the last --port wins
    server.wait_ready(timeout_s=120)
    return server


def _up_on_8000(repo: Path, args: list[str]) -> UpProcess:
    # The examples' own clients load nothing: every model starts at zero and wakes on its
    # first request (a BLS call to another model wakes that one too).
    return UpProcess(repo, *args, "--port", "8000", "--warm-pool", "1", "--no-image-build")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--mirror", type=Path, default=os.environ.get("TRITON_PYTHON_BACKEND_MIRROR")
    )
    parser.add_argument("--ref", default="HEAD")
    parser.add_argument("--only", nargs="*", default=None, help="example names to run")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument(
        "--server", choices=("serve", "up"), default="serve",
        help="serve each example with `thaw serve` (default) or through `thaw up`",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.mirror is None or not Path(args.mirror).exists():
        print("no python_backend mirror (--mirror / $TRITON_PYTHON_BACKEND_MIRROR): skipped")
        return 0
    flags = _serve_flags()
    results = []
    for example in EXAMPLES:
        if args.only and example.name not in args.only:
            continue
        outcome, detail = run_example(example, Path(args.mirror), args.ref, flags, args.server)
        results.append({"example": example.name, "outcome": outcome, "detail": detail})
        print(f"{example.name:22} {outcome:8} {detail[:300]}", flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return 1 if any(r["outcome"] == "failed" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
