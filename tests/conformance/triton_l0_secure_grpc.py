"""Triton's qa/L0_secure_grpc, its Python clients, against `thaw serve`, `thaw up` and real
Triton 2.51 started with tritonserver's gRPC TLS flags.

    .venv/bin/python -m tests.conformance.triton_l0_secure_grpc [--mirror SERVER_GIT_DIR]
        [--client-mirror CLIENT_GIT_DIR] [--ref v2.51.0] [--client-ref HEAD]
        [--server serve|up|triton ...]

test.sh is read from the server mirror (`--mirror`, default `$TRITON_SERVER_MIRROR`) only to
check that the suite exists at `--ref`; the clients it runs, `simple_grpc_infer_client.py` and
`simple_grpc_aio_infer_client.py`, from the client mirror (`--client-mirror`, default
`$TRITON_CLIENT_MIRROR`, its `src/python/examples`), into a temporary directory; without both
mirrors the run says so and exits 0. test.sh's C++ client is not run (no C++ client here).

Its steps, as test.sh runs them, on the `simple` model (tests/fixtures/client_example_models):
a CA, a server certificate for localhost and a client certificate (tests/fixtures/tls_certs,
where test.sh uses 4096-bit RSA and a passphrase it then strips), and a mutated copy of the
client's key and certificate (the first letter of each word capitalised, as test.sh's `sed`);
then for the starts `server` (`--grpc-use-ssl=1`), `mutual` (`--grpc-use-ssl-mutual=1`) and
`both`, each client with `--ssl` and the client certificate must pass (exit 0 and its `PASS`
line), and for `server` and `mutual` each client without `--ssl`, and with the mutated pair,
must fail (exit non-zero). Every start gets test.sh's `--grpc-root-cert ca.crt`.

Exit status: 1 when a step failed on `thaw serve` or `thaw up`; Triton's are reported only.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.conformance.client_example_cases import ServerMode
from tests.conformance.client_example_servers import start
from tests.conformance.qa_checkout import git_show
from tests.fixtures.client_example_models import write_repository
from tests.fixtures.tls_certs import Certificates, make_certificates, openssl_available

__all__ = ["STARTS", "Step", "main", "steps"]

SUITE = "qa/L0_secure_grpc/test.sh"
EXAMPLES_DIR = "src/python/examples"
CLIENTS = ("simple_grpc_infer_client.py", "simple_grpc_aio_infer_client.py")
TARGETS = ("serve", "up", "triton")
CLIENT_TIMEOUT_S = 120

# test.sh's starts: its name -> the flags besides the certificate files
STARTS: dict[str, tuple[str, ...]] = {
    "server": ("--grpc-use-ssl=1",),
    "mutual": ("--grpc-use-ssl-mutual=1",),
    "both": ("--grpc-use-ssl=1", "--grpc-use-ssl-mutual=1"),
}


@dataclass(frozen=True)
class Step:
    """One client run: its name, its TLS arguments, whether test.sh expects it to pass."""

    name: str
    client: str
    args: tuple[str, ...]
    passes: bool


def steps(start_name: str, files: dict[str, Path]) -> list[Step]:
    """test.sh's client runs against one start."""
    good = ("--ssl", "--root-certificates", str(files["ca"]),
            "--private-key", str(files["client_key"]),
            "--certificate-chain", str(files["client_cert"]))  # fmt: skip
    mutated = ("--ssl", "--root-certificates", str(files["ca"]),
               "--private-key", str(files["client2_key"]),
               "--certificate-chain", str(files["client2_cert"]))  # fmt: skip
    out = [Step(f"{start_name}.ssl_infer {c}", c, good, True) for c in CLIENTS]
    if start_name != "both":
        out += [Step(f"{start_name}.no_ssl_fail_infer {c}", c, (), False) for c in CLIENTS]
        out += [Step(f"{start_name}.wrong_ssl_fail_infer {c}", c, mutated, False) for c in CLIENTS]
    return out


def _mutated(source: Path, target: Path) -> Path:
    """test.sh's `sed -i "s/\\b\\(.\\)/\\u\\1/g"`: each word's first character upper-cased."""
    text = source.read_text()
    target.write_text(re.sub(r"\b(.)", lambda m: m.group(1).upper(), text))
    return target


def _files(certs: Certificates, root: Path) -> dict[str, Path]:
    return {
        "ca": certs.ca_cert,
        "server_cert": certs.server_cert,
        "server_key": certs.server_key,
        "client_cert": certs.client_cert,
        "client_key": certs.client_key,
        "client2_cert": _mutated(certs.client_cert, root / "client2.crt"),
        "client2_key": _mutated(certs.client_key, root / "client2.key"),
    }


def _run_step(step: Step, scripts: Path, grpc: str) -> tuple[bool, str]:
    """(whether the step went as test.sh expects, a one-line reason)."""
    # The certificate names localhost (test.sh's CN); the clients connect by that name.
    url = grpc.replace("127.0.0.1", "localhost")
    argv = [sys.executable, str(scripts / step.client), "-v", "-u", url, *step.args]
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S, cwd=scripts,
            check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return False, f"did not finish within {CLIENT_TIMEOUT_S} s"
    output = (proc.stdout + proc.stderr).strip().splitlines()
    last = output[-1][:160] if output else ""
    passed = proc.returncode == 0 and "PASS" in proc.stdout
    if step.passes:
        return passed, f"rc={proc.returncode} {last}"
    return proc.returncode != 0, f"rc={proc.returncode} (expected to fail) {last}"


def run_target(target: str, scripts: Path, work: Path) -> dict[str, tuple[bool, str]]:
    """Every start and step against `target`: step name -> (as expected, reason)."""
    certs = make_certificates(work / "certs")
    files = _files(certs, work / "certs")
    tls = ("--grpc-server-cert", str(files["server_cert"]),
           "--grpc-server-key", str(files["server_key"]),
           "--grpc-root-cert", str(files["ca"]))  # fmt: skip
    results: dict[str, tuple[bool, str]] = {}
    for start_name, flags in STARTS.items():
        repo = write_repository(work / f"models-{target}-{start_name}", ("simple",))
        mode = ServerMode(("simple",), flags=(*tls, *flags))
        try:
            with start(target, repo, mode, fixed_ports=False) as run:
                for step in steps(start_name, files):
                    results[step.name] = outcome = _run_step(step, scripts, run.grpc)
                    verdict = "ok" if outcome[0] else "FAILED"
                    print(f"{target:6} {step.name:60} {verdict:6} {outcome[1]}", flush=True)
        except RuntimeError as exc:
            for step in steps(start_name, files):
                results[step.name] = (False, f"{target} did not start: {str(exc)[-300:]}")
                print(f"{target:6} {step.name:60} FAILED did not start", flush=True)
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
    if not openssl_available():
        print("skipped: no openssl command to make the certificates", file=sys.stderr)
        return 0
    by_target: dict[str, dict[str, tuple[bool, str]]] = {}
    with tempfile.TemporaryDirectory(prefix="thaw-l0-secure-grpc-") as tmp:
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
        print(f"{target}: {good}/{len(results)} steps as test.sh expects")
    thaw = [r for t, r in by_target.items() if t != "triton"]
    return 1 if any(not ok for r in thaw for ok, _ in r.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
