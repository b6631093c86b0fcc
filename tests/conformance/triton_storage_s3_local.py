"""Run the Python test of Triton's qa/L0_storage_S3_local, unchanged, against `thaw serve` and
`thaw up`; report it.

    .venv/bin/python -m tests.conformance.triton_storage_s3_local [--mirror DIR] [--refs REF]
        [--server serve|up ...]

Triton's file is read at run time from a local git mirror of triton-inference-server/server
(`--mirror`, default `$TRITON_SERVER_MIRROR`; no mirror: skipped, exit 0) into a temporary
directory: `qa/L0_storage_S3_local/mock_s3_service.py`, an S3 endpoint on localhost:8080 that
answers every HEAD 200 and every GET 404 and passes once it saw a HEAD and a GET, none of them
advertising HTTP/2 (`Connection: Upgrade`, `Upgrade: h2c`, `HTTP2-Settings`). As test.sh does,
the server is started on `--model-repository=s3://localhost:8080/dummy-bucket
--exit-timeout-secs=120`: the start must be refused (the bucket answers no listing) and the
mock must print `TEST PASSED`. Its other cases (inference from a MinIO bucket, poll, several
repositories) need Triton's QA models and MinIO; they are tests/integration/runtime/
test_serve_s3_repository.py's, against moto. Port 8080 must be free (run under `unshare -n`
otherwise). Exit status: 0 when every run passed (or no mirror), 1 otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.conformance.qa_checkout import (
    Result,
    extract,
    have_mirror,
    mirror_parser,
    port_in_use,
    print_results,
)
from tests.conformance.qa_servers import KINDS, refusal

_MOCK = "qa/L0_storage_S3_local/mock_s3_service.py"
_PORT = 8080  # the mock's, fixed in Triton's file
_REPOSITORY = f"s3://localhost:{_PORT}/dummy-bucket"
_ARGS = ("--exit-timeout-secs=120",)


def _run(ref: str, root: Path, kind: str) -> Result:
    """One run of test.sh's HTTP/2 case against `thaw <kind>`."""
    test = f"http2_advertise_test ({kind})"
    mock = subprocess.Popen(
        [sys.executable, str(root / _MOCK)],
        cwd=root / "qa/L0_storage_S3_local",
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 10
        while not port_in_use(_PORT):  # test.sh sleeps 2 s
            if mock.poll() is not None or time.monotonic() > deadline:
                return Result(ref, _MOCK, test, "error", "the mock S3 service did not start")
            time.sleep(0.05)
        started, log = refusal(kind, _REPOSITORY, _ARGS)  # type: ignore[arg-type]
        output, _ = mock.communicate(timeout=30)  # it stops at its first pass, or after 10 s
    finally:
        if mock.poll() is None:
            mock.kill()
            mock.wait()
    if started:
        return Result(ref, _MOCK, test, "failed", "the server started on a bucket it cannot list")
    if "TEST PASSED" not in output:
        detail = " ".join(output.split())[-300:] or "no output"
        return Result(ref, _MOCK, test, "failed", f"mock: {detail}; server: {log[-300:]!r}")
    return Result(ref, _MOCK, test, "passed", "")


def main(argv: list[str] | None = None) -> int:
    parser = mirror_parser(__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--refs", nargs="+", default=["v2.51.0"])
    parser.add_argument("--server", choices=KINDS, action="append", default=None)
    args = parser.parse_args(argv)
    if not all(have_mirror(args.mirror, ref, _MOCK) for ref in args.refs):
        return 0
    # test.sh exports MinIO's credentials for every server it starts; the mock checks none.
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "minio")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "miniostorage")
    if port_in_use(_PORT):
        raise SystemExit(f"port {_PORT} is in use; the mock needs it (run under unshare -n)")
    results = []
    for ref in args.refs:
        with tempfile.TemporaryDirectory(prefix="thaw-l0-storage-s3-") as tmp:
            extract(args.mirror, ref, [_MOCK], Path(tmp))
            for kind in args.server or ["serve"]:
                results.append(_run(ref, Path(tmp), kind))
    print_results(results)
    return 0 if all(r.outcome == "passed" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
