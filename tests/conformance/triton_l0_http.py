"""Run Triton's own L0_http protocol tests, unchanged, against `thaw serve`; report each test.

    .venv/bin/python -m tests.conformance.triton_l0_http [--mirror GIT_DIR] [--refs v2.51.0 HEAD]

Triton's tests are never part of this project: they are read at run time from a local git
mirror of triton-inference-server/server (`--mirror`, default `$TRITON_SERVER_MIRROR`) into a
temporary directory, and the run is skipped (exit 0) when there is no mirror. For each ref it
extracts `qa/L0_http/http_test.py`, `qa/L0_http/python_http_aio_test.py`,
`qa/L0_http/generate_endpoint_test.py` (with Triton's `mock_llm` model it serves) and the
`qa/common/test_util.py` they import, builds the model repositories `qa/L0_http/test.sh` builds
(tests/fixtures/triton_qa_models.py), starts `thaw serve` on port 8000 with the flags test.sh
gives tritonserver (the tests hard-code localhost:8000, so suites run one after another), and
runs each file with plain unittest, as test.sh does (tests/conformance/unittest_json.py).
Then test.sh's own curl checks (JSON and binary outputs of `simple` by `binary_data` and
`binary_data_output`, the `data`/`shape` mismatch answers, the server still serving after them)
run with bash, unchanged, against the `simple` model of Triton's client examples
(tests/fixtures/client_example_models.py): one row, passed when test.sh's RET stays 0.

Deselected: `test_loading_large_invalid_model`, which builds ~12 GiB of request in the client
(`--with-large` runs it; tests/integration/runtime/test_triton_http_parity.py pins the same answer).
docs/triton-http-parity.md lists the tests that fail on purpose, and why.
Exit status: 0 when every selected test passed (or no mirror), 1 otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.conformance.qa_checkout import (
    Result,
    extract,
    git_show,
    have_mirror,
    mirror_parser,
    print_results,
    run_unittest,
)
from tests.conformance.qa_servers import KINDS, start, unsupported
from tests.fixtures.client_example_models import write_repository
from tests.fixtures.triton_qa_models import build_aio_repo, build_http_test_repo

_FILES = (
    "qa/L0_http/http_test.py",
    "qa/L0_http/python_http_aio_test.py",
    "qa/L0_http/generate_endpoint_test.py",
    "qa/common/test_util.py",
)
# The generate extension's model repository, relative to qa/L0_http as test.sh names it: it
# moved to qa/python_models after 2.51.
_GENERATE_REPOS = ("../python_models/generate_models", "generate_models")
_GENERATE_MODEL = ("mock_llm/config.pbtxt", "mock_llm/1/model.py")
# Tests for extensions Thaw does not have: none since the trace extension's settings
# (thawserver.settings_api). Shared memory: system shared memory is implemented and CUDA's
# answered as a Triton without GPUs answers it (docs/shared-memory.md).
_OUT_OF_SCOPE: tuple[str, ...] = ()
_LARGE = "test_loading_large_invalid_model"


@dataclass(frozen=True)
class Suite:
    """One test file, the repository it needs and the server flags test.sh uses for it."""

    file: str
    repo: str
    serve_args: tuple[str, ...]


def _suites(test_sh: str) -> list[Suite]:
    """The server flags for http_test.py follow test.sh: main runs it in explicit mode."""
    http_args: tuple[str, ...] = ()
    if "--model-control-mode=explicit --load-model=*" in test_sh:
        http_args = ("--model-control-mode", "explicit", "--load-model", "*")
    generate = next((r for r in _GENERATE_REPOS if f"`pwd`/{r}" in test_sh), _GENERATE_REPOS[0])
    return [
        Suite("python_http_aio_test.py", "models", ()),
        Suite("http_test.py", "python_unit_test_models", http_args),
        Suite("generate_endpoint_test.py", generate, ()),
    ]


def _deselected(test_id: str, *, with_large: bool) -> str | None:
    if any(word in test_id for word in _OUT_OF_SCOPE):
        return "out of scope (extension Thaw does not have)"
    if test_id.endswith(_LARGE) and not with_large:
        return "needs ~12 GiB of client memory (--with-large)"
    return None


def _run_suite(
    ref: str, qa_dir: Path, suite: Suite, repo: Path, *, with_large: bool, kind: str
) -> list[Result]:
    module = suite.file.removesuffix(".py")
    listing = run_unittest(qa_dir, "--list", module)
    if listing.returncode != 0:
        raise SystemExit(f"cannot load {ref}:{suite.file}:\n{listing.stderr}")
    results: list[Result] = []
    selected = []
    for test_id in listing.stdout.split():
        reason = _deselected(test_id, with_large=with_large)
        if reason is None:
            selected.append(test_id)
        else:
            results.append(
                Result(ref, suite.file, test_id.rsplit(".", 1)[-1], "deselected", reason)
            )
    if not selected:
        return results
    flag = unsupported(kind, suite.serve_args)
    if flag is not None:  # a difference between the targets, reported as such
        return results + [
            Result(ref, suite.file, t.rsplit(".", 1)[-1], "error", f"thaw {kind} has no {flag}")
            for t in selected
        ]
    server = start(kind, repo, suite.serve_args)
    report = qa_dir / f"{module}.json"
    try:
        run = run_unittest(qa_dir, "--out", str(report), *selected)
        if not report.is_file():
            raise SystemExit(f"{ref}:{suite.file} did not report:\n{run.stderr[-4000:]}")
    finally:
        rc = server.stop()
        if rc != 0:
            print(f"warning: thaw {kind} exited {rc}; log: {server.log_path}", file=sys.stderr)
    for test_id, row in json.loads(report.read_text()).items():
        detail = " ".join(row["detail"].split())[:240]
        name = test_id.rsplit(".", 1)[-1]
        results.append(Result(ref, suite.file, name, row["outcome"], detail))
    return results


def curl_section(test_sh: str) -> str | None:
    """test.sh's curl checks: from its first `rm -f ./curl.out` to the `kill $SERVER_PID` that
    ends that server's run (None when the file has none)."""
    start_at = test_sh.find("rm -f ./curl.out")
    if start_at < 0:
        return None
    end_at = test_sh.find("kill $SERVER_PID", start_at)
    return test_sh[start_at : end_at if end_at >= 0 else len(test_sh)]


def _run_curl_checks(ref: str, work: Path, test_sh: str, kind: str) -> list[Result]:
    """Run test.sh's curl checks with bash against `simple`, as test.sh does (RET=1 on any)."""
    section = curl_section(test_sh)
    if section is None:
        return []
    repo = write_repository(work / "curl_models", ("simple",))
    script = work / "curl_checks.sh"
    script.write_text(f'RET=0\ncd "{work}"\n{section}\necho "RET=$RET"\n')
    server = start(kind, repo, ())
    try:
        run = subprocess.run(
            ["bash", str(script)], capture_output=True, text=True, timeout=300, check=False
        )
    finally:
        server.stop()
    passed = run.returncode == 0 and run.stdout.rstrip().endswith("RET=0")
    detail = "" if passed else " ".join((run.stdout + run.stderr).split())[-240:]
    return [Result(ref, "test.sh", "curl checks", "passed" if passed else "failed", detail)]


def run(mirror: Path, refs: list[str], *, with_large: bool, kind: str = "serve") -> list[Result]:
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="thaw-triton-qa-") as tmp:
        root = Path(tmp)
        for ref in refs:
            base = root / ref.replace("/", "_")
            extract(mirror, ref, _FILES, base)
            test_sh = (git_show(mirror, ref, "qa/L0_http/test.sh") or b"").decode()
            qa_dir = base / "qa" / "L0_http"
            label = ref if kind == "serve" else f"{ref} (thaw up)"
            build_aio_repo(qa_dir / "models")
            build_http_test_repo(
                qa_dir / "python_unit_test_models",
                with_main_models="simple_identity_int64" in test_sh,
            )
            for suite in _suites(test_sh):
                repo = qa_dir / suite.repo
                if suite.file == "generate_endpoint_test.py":  # Triton's own model, unchanged
                    prefix = Path(os.path.normpath(repo)).relative_to(base).as_posix()
                    extract(mirror, ref, (f"{prefix}/{f}" for f in _GENERATE_MODEL), base)
                results += _run_suite(label, qa_dir, suite, repo, with_large=with_large, kind=kind)
            results += _run_curl_checks(label, qa_dir, test_sh, kind)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = mirror_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--refs", nargs="+", default=["v2.51.0", "HEAD"])
    parser.add_argument("--with-large", action="store_true", help=f"also run {_LARGE}")
    parser.add_argument(
        "--server", choices=KINDS, default="serve",
        help="run against `thaw serve` (default) or through `thaw up`, models at zero",
    )  # fmt: skip
    args = parser.parse_args(argv)
    mirror: Path = args.mirror
    if not have_mirror(mirror, args.refs[0], _FILES[0]):
        return 0
    results = run(mirror, args.refs, with_large=args.with_large, kind=args.server)
    print_results(results)
    failed = [r for r in results if r.outcome in ("failed", "error")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
