"""Run Triton's own L0_shared_memory tests, unchanged, against `thaw serve`; report each test.

    .venv/bin/python -m tests.conformance.triton_l0_shared_memory [--mirror DIR] [--refs REF]

The sibling of tests/conformance/triton_l0_http.py, in its style: Triton's files are read at
run time from a local git mirror of triton-inference-server/server (`--mirror`, default
`$TRITON_SERVER_MIRROR`; no mirror: skipped, exit 0) into a temporary directory:
`qa/L0_shared_memory/shared_memory_test.py`, the `qa/common` modules it imports (infer_util,
shm_util, test_util) and the `execute_delayed_model` Python model its test.sh copies. As
test.sh does, each `SharedMemoryTest` test runs once per client type (`CLIENT_TYPE` http, then
grpc) against a fresh server over the `models` repository (its `simple` model: INT32 [16]
add/sub, max_batch_size 8, tests/fixtures/triton_qa_models.py), and the two
`TestSharedMemoryUnregister` tests run against `simple` as the 15 s delayed model. The tests
hard-code localhost:8000 (HTTP) and 8001 (gRPC): `thaw serve` takes those ports, so suites run
one after another (inside `unshare -n sh -c 'ip link set lo up && ...'` if they are taken).

Everything at v2.51.0 is system shared memory; its CUDA twin (`qa/L0_cuda_shared_memory`)
needs a GPU and is not run. Exit status: 0 when every test passed (or no mirror), 1 otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.conformance.qa_checkout import (
    Result,
    git_show,
    have_mirror,
    mirror_parser,
    print_results,
)
from tests.conformance.qa_servers import KINDS, start
from tests.fixtures.triton_qa_models import build_aio_repo

GRPC_PORT = 8001
_PROJECT_ROOT = Path(__file__).resolve().parents[2]
_TEST = "qa/L0_shared_memory/shared_memory_test.py"
_FILES = (
    _TEST,
    "qa/common/infer_util.py",
    "qa/common/shm_util.py",
    "qa/common/test_util.py",
    "qa/python_models/execute_delayed_model/model.py",
    "qa/python_models/execute_delayed_model/config.pbtxt",
)
_MODULE = "shared_memory_test"
_CLIENTS = ("http", "grpc")
_UNREGISTER = "TestSharedMemoryUnregister.test_unregister_shm_during_inference_"
# Tests of the client library alone (no server call), deselected with the reason.
_CLIENT_ONLY = {
    "test_invalid_create_shm": "tritonclient's own error text, no server call: the C library of "
    "tritonclient 2.51 says 'unable to initialize the size', the Python one installed here "
    "(2.73) 'unable to create the shared memory region'",
}


def _unittest(qa_dir: Path, client: str, *args: str) -> subprocess.CompletedProcess[str]:
    """tests.conformance.unittest_json in Triton's QA dir, with test.sh's `CLIENT_TYPE`."""
    env = {**os.environ, "PYTHONPATH": str(_PROJECT_ROOT), "CLIENT_TYPE": client}
    return subprocess.run(
        [sys.executable, "-m", "tests.conformance.unittest_json", *args],
        cwd=qa_dir, env=env, capture_output=True, text=True, check=False, timeout=1800,
    )  # fmt: skip


def _run_one(ref: str, qa_dir: Path, repo: Path, test_id: str, client: str, kind: str) -> Result:
    """One test on a fresh server (test.sh restarts tritonserver for each)."""
    server = start(kind, repo, ("--grpc-port", str(GRPC_PORT)))
    report = qa_dir / "report.json"
    report.unlink(missing_ok=True)
    try:
        run = _unittest(qa_dir, client, "--out", str(report), test_id)
        if not report.is_file():
            raise SystemExit(f"{ref}:{test_id} did not report:\n{run.stderr[-4000:]}")
    finally:
        rc = server.stop()
        if rc != 0:
            print(f"warning: thaw {kind} exited {rc}; log: {server.log_path}", file=sys.stderr)
    row = json.loads(report.read_text())[test_id]
    detail = " ".join(row["detail"].split())[:240]
    name = f"{test_id.rsplit('.', 1)[-1]} [{client}]"
    return Result(ref, Path(_TEST).name, name, row["outcome"], detail)


def _delayed_repo(qa_dir: Path) -> Path:
    """test.sh's `python_models`: the execute_delayed_model as `simple`."""
    source = qa_dir.parent / "python_models" / "execute_delayed_model"
    model = qa_dir / "python_models" / "simple"
    (model / "1").mkdir(parents=True, exist_ok=True)
    (model / "1" / "model.py").write_bytes((source / "model.py").read_bytes())
    (model / "config.pbtxt").write_bytes((source / "config.pbtxt").read_bytes())
    return qa_dir / "python_models"


def run(
    mirror: Path, refs: list[str], *, only: list[str] | None = None, kind: str = "serve"
) -> list[Result]:
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="thaw-triton-shm-") as tmp:
        for git_ref in refs:
            ref = git_ref if kind == "serve" else f"{git_ref} (thaw up)"
            base = Path(tmp) / git_ref.replace("/", "_")
            for path in _FILES:
                content = git_show(mirror, git_ref, path)
                if content is None:
                    raise SystemExit(f"{ref}:{path} is not in {mirror}")
                (base / path).parent.mkdir(parents=True, exist_ok=True)
                (base / path).write_bytes(content)
            qa_dir = base / "qa" / "L0_shared_memory"
            models = build_aio_repo(qa_dir / "models")
            delayed = _delayed_repo(qa_dir)
            listing = _unittest(qa_dir, "http", "--list", _MODULE)
            if listing.returncode != 0:
                raise SystemExit(f"cannot load {ref}:{_TEST}:\n{listing.stderr}")
            for test_id in listing.stdout.split():
                if only and not any(word in test_id for word in only):
                    continue
                reason = _CLIENT_ONLY.get(test_id.rsplit(".", 1)[-1])
                if reason is not None:
                    name = test_id.rsplit(".", 1)[-1]
                    results.append(Result(ref, Path(_TEST).name, name, "deselected", reason))
                    continue
                if _UNREGISTER in test_id:
                    client = test_id.rsplit("_", 1)[-1]
                    results.append(_run_one(ref, qa_dir, delayed, test_id, client, kind))
                    continue
                for client in _CLIENTS:
                    results.append(_run_one(ref, qa_dir, models, test_id, client, kind))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = mirror_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--refs", nargs="+", default=["v2.51.0"])
    parser.add_argument("--only", nargs="*", help="run only tests whose id contains a word")
    parser.add_argument(
        "--server", choices=KINDS, default="serve",
        help="run against `thaw serve` (default) or through `thaw up`, models at zero",
    )  # fmt: skip
    args = parser.parse_args(argv)
    mirror: Path = args.mirror
    if not have_mirror(mirror, args.refs[0], _TEST):
        return 0
    results = run(mirror, args.refs, only=args.only, kind=args.server)
    print_results(results)
    failed = [r for r in results if r.outcome in ("failed", "error")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
