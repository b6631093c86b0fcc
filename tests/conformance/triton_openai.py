"""Run Triton's OpenAI-frontend tests, unchanged, against `thaw serve`; report each test.

    .venv/bin/python -m tests.conformance.triton_openai [--mirror GIT_DIR] [--ref HEAD]

FILES (from `python/openai/tests/` of a local git mirror of triton-inference-server/server:
`--mirror`, default `$TRITON_SERVER_MIRROR`; the run is skipped, exit 0, without one) are
copied into a temporary directory next to Thaw's harness as their `conftest.py`
(tests/conformance/triton_openai_harness.py: the fixtures of Triton's conftest over a real
`thaw serve` of a vLLM-style causal LM on the CPU), with Triton's own test models (`mock_llm`,
`identity_py`, `tool_stream_py`, unchanged) beside them, and run by pytest; their `tests.utils`
is Thaw's stand-in (tests/conformance/triton_openai_server.py: `OpenAIServer`, `setup_server`,
`setup_fastapi_app` over a real `thaw serve` started with the same flags). LEFT_OUT are the files
that cannot run unchanged, and why; DESELECTED the tests that assert a deliberate difference,
each with its reason (both printed). Exit status: 0 when every selected test passed (or no
mirror), 1 otherwise.
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
    extract,
    git_show,
    have_mirror,
    mirror_parser,
    print_results,
)

_PROJECT_ROOT = Path(__file__).resolve().parents[2]
_TESTS_DIR = "python/openai/tests"
# The files run unchanged. The others, and why not, are LEFT_OUT.
FILES = (
    "test_openai_client.py",
    "test_completions.py",
    "test_observability.py",
    "test_model_management.py",
    "test_tool_calling.py",
)
# Triton's own test models (mock_llm, identity_py; tool_stream_py, a decoupled model that
# streams a Mistral-format call), copied unchanged beside the test files.
_MODEL_FILES = ("config.pbtxt", "1/model.py")
_TEST_MODELS = (
    *(f"test_models/{m}/{f}" for m in ("mock_llm", "identity_py") for f in _MODEL_FILES),
    *(f"tool_parser_models/tool_stream_py/{f}" for f in _MODEL_FILES),
)
TESTS = f"{_TESTS_DIR}/{FILES[0]}"
DESELECT_ENV = "THAW_TRITON_OPENAI_DESELECT"

LEFT_OUT = {
    "test_chat_completions.py": "imports `tritonserver` (Triton's Python bindings; its fixtures "
    "are annotated `tritonserver.Server`) at module level; a hub tokenizer",
    "test_embeddings.py": "serves its own `vllm_embedding_models` repository (all-MiniLM-L6-v2 "
    "through vLLM's engine, a hub download) and compares that model's exact vectors",
    "test_request_size.py": "imports `tritonserver` and Triton's frontend's middleware module "
    "(`RequestSizeLimitMiddleware`, whose messages it compares) at module level",
    "test_lora.py": "imports Triton's frontend's module (`_parse_lora_configs`, "
    "`_validate_lora_path_trtllm`) and `huggingface_hub` at module level; its servers download "
    "gemma-2b and two adapters for vLLM's engine (or need TensorRT-LLM engines). Thaw's "
    "--lora-separator asks its questions of an echo model (tests/integration/openai)",
    "test_openai_restricted_apis.py": "imports Triton's frontend's `RestrictedFeatures` module",
}

_FINISH_LENGTH = (
    "asserts finish_reason 'stop' at the default max_tokens; Thaw says 'length' when the model "
    "generated max_tokens tokens (OpenAI's rule; Triton's frontend always says 'stop')"
)
_SCHEMA_422 = (
    "expects FastAPI's 422 for a schema error; Thaw answers 400 invalid_request_error, as "
    "OpenAI's API and vLLM's server do (the `openai` client raises BadRequestError)"
)
_DETAIL = (
    "reads FastAPI's `detail` field; Thaw's errors are OpenAI's document "
    '`{"error": {"message", "type", "param", "code"}}`, which the `openai` client parses'
)
_NOT_LOADED = (
    'asserts Triton\'s frontend\'s 400 `{"detail": "Unknown model: ..."}` for a completion '
    "to a model that is not loaded; Thaw answers it as its v2 routes do, 503 'model ... is not "
    "ready' (the model is in the repository), in OpenAI's error document"
)
_C, _A, _T = "TestOpenAIClient", "TestAsyncOpenAIClient", "TestCompletions"
_COMP, _MM = "test_completions.py", "test_model_management.py"
# Test (node id; a parametrized one whole, or one case with its [id]) -> why it is not run.
DESELECTED = {
    f"{FILES[0]}::{_C}::test_openai_client_completion": _FINISH_LENGTH,
    f"{FILES[0]}::{_C}::test_openai_client_chat_completion": "same: finish_reason 'length'",
    f"{FILES[0]}::{_A}::test_openai_client_completion": "same: finish_reason 'length'",
    f"{FILES[0]}::{_A}::test_openai_client_chat_completion": "same: finish_reason 'length'",
    f"{FILES[0]}::{_A}::test_chat_top_logprobs_exceeds_max": _SCHEMA_422,
    f"{FILES[0]}::{_A}::test_completion_logprobs_exceeds_max": _SCHEMA_422,
    f"{_COMP}::{_T}::test_completions_invalid_sampling_parameters": _SCHEMA_422,
    f"{_COMP}::{_T}::test_completions_empty_request": _SCHEMA_422,
    f"{_COMP}::{_T}::test_completions_no_model": _SCHEMA_422,
    f"{_COMP}::{_T}::test_completions_no_prompt": _SCHEMA_422,
    f"{_COMP}::{_T}::test_no_prompt": _SCHEMA_422,
    f"{_COMP}::{_T}::test_completions_logprobs_validation": _SCHEMA_422,
    f"{_COMP}::{_T}::test_completions_sampling_parameters[logit_bias-value7]": _DETAIL,
    f"{_COMP}::{_T}::test_completions_max_tokens": (
        "counts space-delimited words (1 at max_tokens 1, more at 100): the CPU LM's tokens are "
        "bytes drawn from random weights, with no words to count"
    ),
    f"{_COMP}::{_T}::test_completions_multiple_choices": (
        "asserts `n` > 1 is refused ('only single choice'); Thaw serves n choices (each its "
        "own request to the model); `best_of` > 1 is refused, in OpenAI's error document"
    ),
    f"{_MM}::TestModelControlCLIOptions::test_explicit_mode_load_invalid_model_name_error": (
        "expects what tritonserver reports on the directory a path-like `--load-model` name "
        "(`../../etc`, `..`, `/etc/passwd`) resolves to; Thaw looks names up in its repository "
        "only, never outside it, and refuses them as not found (`''`: Triton's 'Invalid model "
        "name')"
    ),
    f"{_MM}::TestModelManagementInference::test_load_completions": (
        f"{_NOT_LOADED}; and asserts finish_reason 'stop' at max_tokens (Thaw: 'length')"
    ),
    f"{_MM}::TestModelManagementInference::test_unload_rejects_inference": _NOT_LOADED,
    f"{_MM}::TestModelManagementInference::test_reload_inference": _NOT_LOADED,
    "test_tool_calling.py::TestAsyncClientToolCalling": (
        "the whole class: a real Llama 3 or Mistral model (through vLLM or TRT-LLM) must decide "
        "to call the weather tools for Dallas; the harness's CPU LM has random weights. Thaw's "
        "own tests (tests/integration/openai/test_openai_tool_calls.py) ask the same questions "
        "of mock models that answer in each format"
    ),
}


def run(mirror: Path, ref: str) -> list[Result]:
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="thaw-triton-openai-") as tmp:
        root = Path(tmp) / "triton_openai_tests"
        root.mkdir()
        for name in FILES:
            source = git_show(mirror, ref, f"{_TESTS_DIR}/{name}")
            assert source is not None, name
            (root / name).write_bytes(source)
        extract(mirror, ref, (f"{_TESTS_DIR}/{path}" for path in _TEST_MODELS), Path(tmp))
        for folder in ("test_models", "tool_parser_models"):
            shutil.copytree(Path(tmp) / _TESTS_DIR / folder, root / folder)
        shutil.copy(Path(__file__).with_name("triton_openai_harness.py"), root / "conftest.py")
        # One event loop for the whole run: Triton's tests keep one async client per class.
        (root / "pytest.ini").write_text(
            "[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = session\n"
            "asyncio_default_test_loop_scope = session\n"
        )
        report = Path(tmp) / "report.xml"
        config = str(root / "pytest.ini")
        args = [sys.executable, "-m", "pytest", *FILES, "-p", "no:cacheprovider", "-q",
                f"--junitxml={report}", "--rootdir", str(root), "-c", config]  # fmt: skip
        # Exact ids, which `--deselect`'s prefix match is not: the harness drops them at
        # collection.
        env = {**os.environ, "PYTHONPATH": str(_PROJECT_ROOT), DESELECT_ENV: "\n".join(DESELECTED)}
        proc = subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=1800)
        if not report.exists():
            raise SystemExit(
                f"pytest wrote no report:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
            )
        results += _read(report, ref)
    for test, why in DESELECTED.items():
        name, _, rest = test.partition("::")
        results.append(Result(ref, name, rest, "deselected", why))
    for name, why in LEFT_OUT.items():
        results.append(Result(ref, name, "(whole file)", "deselected", why))
    return results


def _read(report: Path, ref: str) -> list[Result]:
    rows = []
    for case in ET.parse(report).getroot().iter("testcase"):
        module, _, cls = case.get("classname", "").rpartition(".")
        name = f"{cls}::{case.get('name')}"
        outcome, detail = "passed", ""
        for kind in ("failure", "error", "skipped"):
            node = case.find(kind)
            if node is not None:
                outcome = {"failure": "failed"}.get(kind, kind)
                detail = (node.get("message") or "").replace("\n", " ").replace("|", "/")[:160]
        rows.append(Result(ref, f"{module.rpartition('.')[2]}.py", name, outcome, detail))
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
