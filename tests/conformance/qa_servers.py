"""The server a QA run tests: `thaw serve`, or `thaw up` with every model at zero.

    start(kind, repo, args)     -> a started server on Triton's ports (8000 HTTP, 8001 gRPC,
                                   8002 metrics), ready; RuntimeError with its log when not
                                   (repo: a directory, or an s3:// URL as a string)
    refusal(kind, repo, args)   -> (started?, log): for test.sh's "the server refuses to start"
    unsupported(kind, args)     -> the first flag `kind` does not take, or None
    add_server_argument(parser) -> a runner's `--server serve|up` (repeatable)

`thaw up` serves the same repository with its models at zero: nothing is woken before the
suite's first request (the warm pool holds one idle runtime process, no model in it), so each
test's first request to a model waits for that model's wake, as a Triton user moving to Thaw's
front door would see it. Flags test.sh gives tritonserver go to both commands; one `thaw up`
does not take is reported, never silently dropped.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from functools import cache
from pathlib import Path

from tests.conformance.qa_checkout import port_in_use
from tests.fixtures.serve_process import ServeProcess
from tests.fixtures.up_process import UpProcess

__all__ = [
    "KINDS",
    "PORTS",
    "Server",
    "add_server_argument",
    "first_unknown",
    "refusal",
    "start",
    "unsupported",
]

PORTS = (8000, 8001, 8002)
KINDS = ("serve", "up")
Server = ServeProcess | UpProcess
_PROJECT_ROOT = Path(__file__).resolve().parents[2]


def add_server_argument(parser: argparse.ArgumentParser) -> None:
    """A runner's `--server serve|up`, repeatable; `args.server or ["serve"]` is the list."""
    parser.add_argument(
        "--server", choices=KINDS, action="append", default=None,
        help="thaw serve (the default) or thaw up; give it twice for both",
    )  # fmt: skip


@cache
def _flags(kind: str) -> frozenset[str]:
    """The `--...` flags `thaw <kind> --help` lists."""
    out = subprocess.run(
        [sys.executable, "-m", "thaw.cli", kind, "--help"],
        capture_output=True, text=True, check=False, cwd=_PROJECT_ROOT,
    ).stdout  # fmt: skip
    return frozenset(word.split("=")[0].rstrip(",") for word in out.split() if word[:2] == "--")


def unsupported(kind: str, args: tuple[str, ...]) -> str | None:
    """The first flag in `args` that `thaw <kind>` does not take, or None."""
    return first_unknown(args, _flags(kind))


def first_unknown(args: tuple[str, ...], known: frozenset[str]) -> str | None:
    """The first `--flag` (or `--flag=value`) of `args` not in `known`, or None."""
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag.startswith("--") and flag not in known:
            return flag
    return None


def _argv(kind: str, args: tuple[str, ...]) -> tuple[str, ...]:
    if kind == "serve":
        return ("--port", str(PORTS[0]), *args)
    # The last --port wins over UpProcess's `--port 0`; gRPC and metrics then default to
    # Triton's 8001 and 8002. No image build: the first wake loads the model from the repository.
    return ("--port", str(PORTS[0]), "--warm-pool", "1", "--no-image-build", *args)


def start(
    kind: str,
    repo: Path | str,
    args: tuple[str, ...],
    *,
    ready: bool = True,
    env: dict[str, str] | None = None,
) -> Server:
    """`thaw <kind>` on Triton's ports, ready (listening only, when not `ready`); RuntimeError
    (with its log) when it is not. `env`: set in the server's environment besides this
    process's."""
    busy = [port for port in PORTS if port_in_use(port)]
    if busy:
        raise SystemExit(f"port(s) {busy} in use; Triton's tests need them (run under unshare -n)")
    if kind == "up":
        # Waits until ready (listening, when not `ready`), or raises.
        return UpProcess(repo, *_argv(kind, args), env=env, ready=ready)
    server = ServeProcess(repo, *_argv(kind, args), env=env)
    try:
        if ready:
            server.wait_ready()
        else:
            server.wait_listening(120.0)
    except RuntimeError:
        server.stop()
        raise
    return server


def refusal(kind: str, repo: Path | str, args: tuple[str, ...]) -> tuple[bool, str]:
    """Start `thaw <kind>` with flags test.sh expects refused: (whether it started, its log)."""
    if kind == "up":
        try:
            up = UpProcess(repo, *_argv(kind, args))
        except RuntimeError as exc:
            return False, str(exc)
        up.stop()
        return True, up.log()
    server = ServeProcess(repo, *_argv(kind, args))
    try:
        server.wait_ready(timeout_s=60)
        started = True
    except RuntimeError:
        started = False
    finally:
        server.stop()  # closes the log's writer: read it by path
    return started, server.log_path.read_text(errors="replace")
