"""Run Triton's OpenAI-frontend client tests, unchanged, against `thaw serve`; report each test.

    .venv/bin/python -m tests.conformance.triton_openai [--mirror GIT_DIR] [--ref HEAD]

`python/openai/tests/test_openai_client.py` is read from a local git mirror of
triton-inference-server/server (`--mirror`, default `$TRITON_SERVER_MIRROR`; the run is skipped,
exit 0, without one) into a temporary directory, next to Thaw's harness as its `conftest.py`
(tests/conformance/triton_openai_harness.py: the fixtures of Triton's conftest over a real
`thaw serve` of a causal LM on the CPU), and run by pytest. The other files of Triton's suite
build their server in-process (`tritonserver`, Triton's FastAPI app) or need a hub tokenizer:
docs/openai.md lists them and why. Deselected tests are printed with their reason. Exit status:
0 when every selected test passed (or no mirror), 1 otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.conformance.qa_checkout import (
    Result,
    git_show,
    have_mirror,
    mirror_parser,
    print_results,
)

_PROJECT_ROOT = Path(__file__).resolve().parents[2]
TESTS = "python/openai/tests/test_openai_client.py"
_FILE = "test_openai_client.py"
DESELECT_ENV = "THAW_TRITON_OPENAI_DESELECT"

# Test (node id within the file) -> why it is not run against Thaw.
DESELECTED = {
    "TestOpenAIClient::test_openai_client_completion": (
        "asserts finish_reason 'stop' at the default max_tokens; Thaw says 'length' when the model "
        "generated max_tokens tokens (OpenAI's rule; Triton's frontend always says 'stop')"
    ),
    "TestOpenAIClient::test_openai_client_chat_completion": "same: finish_reason 'length'",
    "TestAsyncOpenAIClient::test_openai_client_completion": "same: finish_reason 'length'",
    "TestAsyncOpenAIClient::test_openai_client_chat_completion": "same: finish_reason 'length'",
    "TestAsyncOpenAIClient::test_chat_completion_logprobs": "logprobs: not supported (refused)",
    "TestAsyncOpenAIClient::test_completion_logprobs": "logprobs: not supported (refused)",
    "TestAsyncOpenAIClient::test_top_logprobs_requires_logprobs": "logprobs: not supported",
    "TestAsyncOpenAIClient::test_chat_top_logprobs_exceeds_max": (
        "logprobs: not supported (refused 400, not FastAPI's 422 schema error)"
    ),
    "TestAsyncOpenAIClient::test_completion_logprobs_exceeds_max": (
        "logprobs: not supported (refused 400, not FastAPI's 422 schema error)"
    ),
}


def run(mirror: Path, ref: str) -> list[Result]:
    source = git_show(mirror, ref, TESTS)
    assert source is not None
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="thaw-triton-openai-") as tmp:
        root = Path(tmp) / "triton_openai_tests"
        root.mkdir()
        (root / _FILE).write_bytes(source)
        shutil.copy(Path(__file__).with_name("triton_openai_harness.py"), root / "conftest.py")
        # One event loop for the whole run: Triton's tests keep one async client per class.
        (root / "pytest.ini").write_text(
            "[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = session\n"
            "asyncio_default_test_loop_scope = session\n"
        )
        report = Path(tmp) / "report.xml"
        config = str(root / "pytest.ini")
        args = [sys.executable, "-m", "pytest", _FILE, "-p", "no:cacheprovider", "-q",
                f"--junitxml={report}", "--rootdir", str(root), "-c", config]  # fmt: skip
        # Exact ids (parameters aside), which `--deselect`'s prefix match is not: the harness
        # drops them at collection.
        deselect = "\n".join(f"{_FILE}::{test}" for test in DESELECTED)
        env = {**os.environ, "PYTHONPATH": str(_PROJECT_ROOT), DESELECT_ENV: deselect}
        proc = subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=1800)
        if not report.exists():
            raise SystemExit(
                f"pytest wrote no report:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
            )
        results += _read(report, ref)
    results += [Result(ref, _FILE, test, "deselected", why) for test, why in DESELECTED.items()]
    return results


def _read(report: Path, ref: str) -> list[Result]:
    rows = []
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        outcome, detail = "passed", ""
        for kind in ("failure", "error", "skipped"):
            node = case.find(kind)
            if node is not None:
                outcome = {"failure": "failed"}.get(kind, kind)
                detail = (node.get("message") or "").replace("\n", " ").replace("|", "/")[:160]
        rows.append(Result(ref, _FILE, name, outcome, detail))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = mirror_parser(__doc__ or "")
    parser.add_argument("--ref", default="HEAD", help="the mirror's ref to read the tests at")
    args = parser.parse_args(argv)
    if not have_mirror(args.mirror, args.ref, TESTS):
        return 0
    results = run(args.mirror, args.ref)
    print_results(results)
    selected = [r for r in results if r.outcome not in ("deselected", "skipped")]
    return 0 if selected and all(r.outcome == "passed" for r in selected) else 1


if __name__ == "__main__":
    sys.exit(main())
