"""Triton's qa/L0_http_fuzz against `thaw serve` (or `thaw up`): boofuzz mutates the request line
of every v2 path (method, path, version) and the server must answer each and stay up.

    .venv/bin/python -m tests.conformance.triton_l0_http_fuzz [--mirror SERVER_GIT_DIR]
        [--ref v2.51.0] [--server serve|up] [--boofuzz-path DIR]

fuzztest.py and qa/common/test_util.py are read from the server mirror (`--mirror`, default
`$TRITON_SERVER_MIRROR`) at run time. boofuzz is not one of Thaw's dependencies: without it
the run says "boofuzz not installed" and exits 0. It need not be in the venv either:
`pip install --target DIR boofuzz` and `--boofuzz-path DIR` put it on fuzztest.py's path only.
fuzztest.py talks to 127.0.0.1:8000, so the server takes Triton's ports (run under `unshare -n`
when they are in use). The model is the `simple` add/sub the paths name
(tests/fixtures/client_example_models), where test.sh copies an identity model that none of
them names.

It passes when fuzztest.py exits 0 (boofuzz recorded no failed step: every case got an answer)
and, afterwards, the server is live and still infers.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tests.conformance.qa_checkout import extract, git_show
from tests.conformance.qa_servers import start
from tests.fixtures.client_example_models import write_repository

__all__ = ["boofuzz_importable", "main"]

SUITE = "qa/L0_http_fuzz/fuzztest.py"
FILES = (SUITE, "qa/common/test_util.py")
FUZZ_TIMEOUT_S = 3 * 3600
_PROJECT_ROOT = Path(__file__).resolve().parents[2]


def boofuzz_importable(extra_path: Path | None) -> bool:
    """Whether fuzztest.py's interpreter (this one, `extra_path` first) can import boofuzz."""
    if extra_path is None:
        return importlib.util.find_spec("boofuzz") is not None
    return (extra_path / "boofuzz" / "__init__.py").is_file()


def _infer_simple(url: str) -> bool:
    body = {
        "inputs": [
            {"name": name, "shape": [1, 16], "datatype": "INT32", "data": list(range(16))}
            for name in ("INPUT0", "INPUT1")
        ]
    }
    request = urllib.request.Request(
        f"{url}/v2/models/simple/infer", data=json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        answer = json.loads(resp.read())
    return bool(answer["outputs"][0]["data"] == [2 * i for i in range(16)])


def _live(url: str) -> bool:
    with urllib.request.urlopen(f"{url}/v2/health/live", timeout=10) as resp:
        return bool(resp.status == 200)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--mirror", type=Path, default=os.environ.get("TRITON_SERVER_MIRROR", ""))
    parser.add_argument("--ref", default="v2.51.0")
    parser.add_argument("--server", choices=("serve", "up"), default="serve")
    parser.add_argument("--boofuzz-path", type=Path, default=None, metavar="DIR")
    args = parser.parse_args(argv)
    if not boofuzz_importable(args.boofuzz_path):
        print("boofuzz not installed (pip install --target DIR boofuzz; --boofuzz-path DIR): "
              "qa/L0_http_fuzz skipped", file=sys.stderr)  # fmt: skip
        return 0
    if str(args.mirror) in ("", ".") or git_show(args.mirror, args.ref, SUITE) is None:
        print(f"skipped: no Triton server mirror with {SUITE} at {args.ref} (--mirror or "
              "$TRITON_SERVER_MIRROR)", file=sys.stderr)  # fmt: skip
        return 0
    with tempfile.TemporaryDirectory(prefix="thaw-l0-http-fuzz-") as tmp:
        root = Path(tmp)
        extract(args.mirror, args.ref, FILES, root)
        repo = write_repository(root / "models", ("simple",))
        server = start(args.server, repo, ())
        try:
            url = "http://127.0.0.1:8000"
            path = [str(p) for p in (args.boofuzz_path, _PROJECT_ROOT) if p is not None]
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
            began = time.monotonic()
            proc = subprocess.run(
                [sys.executable, "fuzztest.py", "-v"], cwd=root / "qa" / "L0_http_fuzz",
                env=env, capture_output=True, text=True, timeout=FUZZ_TIMEOUT_S, check=False,
            )  # fmt: skip
            took = time.monotonic() - began
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
            print("\n".join(tail))
            alive = server.proc.poll() is None and _live(url)
            infers = alive and _infer_simple(url)
        finally:
            server.stop()
    print(
        f"thaw {args.server}: fuzztest.py exit {proc.returncode} in {took:.0f} s; "
        f"afterwards live={alive} infers={infers}"
    )
    return 0 if proc.returncode == 0 and alive and infers else 1


if __name__ == "__main__":
    sys.exit(main())
