"""Triton's qa/L0_data_compression, its Python clients, against `thaw serve`, `thaw up` and real
Triton 2.51: HTTP request and response compression through tritonclient.

    .venv/bin/python -m tests.conformance.triton_l0_data_compression [--mirror SERVER_GIT_DIR]
        [--client-mirror CLIENT_GIT_DIR] [--ref v2.51.0] [--client-ref HEAD]
        [--server serve|up|triton ...]

test.sh is read from the server mirror (`--mirror`, default `$TRITON_SERVER_MIRROR`) only to
check that the suite exists at `--ref`; its Python clients, `simple_http_infer_client.py` and
`simple_http_aio_infer_client.py`, from the client mirror (`--client-mirror`, default
`$TRITON_CLIENT_MIRROR`); without both the run says so and exits 0. As test.sh, each client runs
`-v` with every pair of `--request-compression-algorithm` and
`--response-compression-algorithm` among deflate, gzip and none that are not the same (six
pairs) against one server of the `simple` model (tests/fixtures/client_example_models), and
passes when it exits 0 (and prints its `PASS` line where it has one). test.sh's C++ parts (its
data_compressor_test of Triton's own compressor, and the C++ client) are not run.

Exit status: 1 when a run failed on `thaw serve` or `thaw up`; Triton's are reported only.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.conformance.client_example_cases import ServerMode
from tests.conformance.client_example_servers import start
from tests.conformance.qa_checkout import git_show
from tests.fixtures.client_example_models import write_repository

__all__ = ["PAIRS", "main", "runs"]

SUITE = "qa/L0_data_compression/test.sh"
EXAMPLES_DIR = "src/python/examples"
CLIENTS = ("simple_http_infer_client.py", "simple_http_aio_infer_client.py")
TARGETS = ("serve", "up", "triton")
CLIENT_TIMEOUT_S = 120
# What a client prints when it passed, where it prints one (simple_http_infer_client.py ends
# with its wrong-model-name demonstration and exits 0)
PASS_LINES = {"simple_http_aio_infer_client.py": "PASS: infer"}
# test.sh's loops: request x response algorithm, "" = none, never the same on both
PAIRS: tuple[tuple[str, str], ...] = tuple(
    (req, resp) for req, resp in itertools.product(("deflate", "gzip", ""), repeat=2) if req != resp
)


def runs() -> list[tuple[str, str, tuple[str, ...]]]:
    """(name, client, arguments) of each client run test.sh makes."""
    out = []
    for client in CLIENTS:
        for req, resp in PAIRS:
            args = ["-v"]
            if req:
                args += ["--request-compression-algorithm", req]
            if resp:
                args += ["--response-compression-algorithm", resp]
            name = f"{client} request={req or 'none'} response={resp or 'none'}"
            out.append((name, client, tuple(args)))
    return out


def _run(client: str, args: tuple[str, ...], scripts: Path, http: str) -> tuple[bool, str]:
    argv = [sys.executable, str(scripts / client), *args, "-u", http]
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S, cwd=scripts,
            check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return False, f"did not finish within {CLIENT_TIMEOUT_S} s"
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    last = lines[-1][:160] if lines else ""
    passed = proc.returncode == 0 and PASS_LINES.get(client, "") in proc.stdout
    return passed, f"rc={proc.returncode} {last}"


def run_target(target: str, scripts: Path, work: Path) -> dict[str, tuple[bool, str]]:
    """Every run against one `target` server: name -> (passed, reason)."""
    repo = write_repository(work / "models", ("simple",))
    results: dict[str, tuple[bool, str]] = {}
    try:
        with start(target, repo, ServerMode(("simple",)), fixed_ports=False) as server:
            for name, client, args in runs():
                results[name] = outcome = _run(client, args, scripts, server.http)
                verdict = "ok" if outcome[0] else "FAILED"
                print(f"{target:6} {name:70} {verdict:6} {outcome[1]}", flush=True)
                if not outcome[0]:
                    print(server.log()[-1500:], flush=True)
    except RuntimeError as exc:
        for name, _, _ in runs():
            results[name] = (False, f"{target} did not start: {str(exc)[-300:]}")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--mirror", type=Path, default=os.environ.get("TRITON_SERVER_MIRROR", ""))
    parser.add_argument(
        "--client-mirror", type=Path, default=os.environ.get("TRITON_CLIENT_MIRROR", "")
    )
    parser.add_argument("--ref", default="v2.51.0")
    parser.add_argument("--client-ref", default="HEAD")
    parser.add_argument("--server", choices=TARGETS, action="append", default=None)
    args = parser.parse_args(argv)
    if str(args.mirror) in ("", ".") or git_show(args.mirror, args.ref, SUITE) is None:
        print(f"skipped: no Triton server mirror with {SUITE} at {args.ref} (--mirror or "
              "$TRITON_SERVER_MIRROR)", file=sys.stderr)  # fmt: skip
        return 0
    if str(args.client_mirror) in ("", "."):
        print("skipped: no Triton client mirror (--client-mirror or $TRITON_CLIENT_MIRROR)",
              file=sys.stderr)  # fmt: skip
        return 0
    by_target: dict[str, dict[str, tuple[bool, str]]] = {}
    with tempfile.TemporaryDirectory(prefix="thaw-l0-data-compression-") as tmp:
        scripts = Path(tmp) / "clients"
        scripts.mkdir()
        for client in CLIENTS:
            content = git_show(args.client_mirror, args.client_ref, f"{EXAMPLES_DIR}/{client}")
            if content is None:
                print(f"skipped: {client} not in the client mirror", file=sys.stderr)
                return 0
            (scripts / client).write_bytes(content)
        for target in args.server or ["serve"]:
            work = Path(tmp) / target
            work.mkdir()
            by_target[target] = run_target(target, scripts, work)
    for target, results in by_target.items():
        good = sum(ok for ok, _ in results.values())
        print(f"{target}: {good}/{len(results)} client runs passed")
    thaw = [r for t, r in by_target.items() if t != "triton"]
    return 1 if any(not ok for r in thaw for ok, _ in r.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
