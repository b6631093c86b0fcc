"""Run Triton vllm_backend's `src/model.py` and `src/utils/`, unchanged, as a Python model of
`thaw serve`, against the stand-in `vllm` package; drive it with vllm_backend's own CI tests
(unchanged) and the `openai` client; report each.

    .venv/bin/python -m tests.conformance.triton_vllm_backend [--mirror GIT_DIR] [--ref HEAD]
        [--python-backend-mirror GIT_DIR]

vllm_backend is never part of this project: its files are read at run time from a local git
mirror of triton-inference-server/vllm_backend (`--mirror`, default
`$TRITON_VLLM_BACKEND_MIRROR`; the run is skipped, exit 0, without one). The model repository
is laid out as its CI's test.sh lays it out: samples/model_repository/vllm_model (its
config.pbtxt, `backend: "vllm"`, unchanged) as `vllm_opt` and copies, and model.py + utils/ as
the `vllm` backend, `backends/vllm/`, as Triton's vLLM container installs them; `thaw serve`
gets `--backend-directory` as test.sh gives tritonserver (a Python-based backend, which Thaw
runs as a Python model of that model.py). `add_sub` for the load/unload test
comes from a python_backend mirror (`--python-backend-mirror`, default
`$TRITON_PYTHON_BACKEND_MIRROR`); without one that test is not run.

No GPU and no vLLM here: `vllm` is tests/conformance/standins/vllm, a TEST DOUBLE of vLLM's
engine API (its docstring says what it does and does not do), put on the server's PYTHONPATH.
What this run proves is Thaw's side: the Python backend runs vllm_backend's model.py as it is
(auto_complete_config, decoupled responses from its own threads and asyncio loop, cancellation,
pb_utils.Logger, custom metrics, finalize). What the model says is the stand-in's, so tests that
compare against facebook/opt-125m's text are deselected (listed with the reason).

The CI tests hard-code Triton's ports (HTTP 8000, gRPC 8001, metrics 8002): run where nothing
else holds them (e.g. `unshare -rn sh -c 'ip link set lo up && ...'`). Exit status: 0 when every
selected test and check passed (or no mirror), 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conformance.pytest_junit import run_pytest
from tests.conformance.qa_checkout import (
    Result,
    extract,
    git_show,
    port_in_use,
    print_results,
    run_unittest,
)
from tests.fixtures.serve_process import ServeProcess

_PROJECT_ROOT = Path(__file__).resolve().parents[2]
STANDINS = Path(__file__).resolve().parent / "standins"
PORTS = (8000, 8001, 8002)
SRC = ("src/model.py", "src/utils/metrics.py", "src/utils/request.py",
       "src/utils/vllm_backend_utils.py")  # fmt: skip
SAMPLE = "samples/model_repository/vllm_model"
CI = "ci/L0_backend_vllm"
COMMON = "ci/common/test_util.py"

# Test id -> why it is not run against the stand-in engine.
_OPT_TEXT = "expects facebook/opt-125m's own greedy text; the stand-in engine's words differ"
DESELECTED = {
    "vllm_backend_test.VLLMTritonBackendTest.test_exclude_input_in_output_default": _OPT_TEXT,
    "vllm_backend_test.VLLMTritonBackendTest.test_exclude_input_in_output_false": _OPT_TEXT,
    "vllm_backend_test.VLLMTritonBackendTest.test_exclude_input_in_output_true": _OPT_TEXT,
    "enabled_stream_test.VLLMTritonStreamTest."
    "test_vllm_model_enabled_stream_exclude_input_in_output_default": _OPT_TEXT,
    "vllm_metrics_test.VLLMTritonMetricsTest.test_vllm_metrics": (
        "expects token counts of opt-125m's tokenizer and output (e.g. prompt tokens); the "
        "stand-in tokenizes by words"
    ),
}
_LOAD_TEST = "vllm_backend_test.VLLMTritonBackendTest.test_vllm_triton_backend"
_REPORT_METRICS = """
parameters: {
  key: "REPORT_CUSTOM_METRICS"
  value: {
    string_value: "true"
  }
}
"""


def install_backend(mirror: Path, ref: str, root: Path) -> Path:
    """`root/backends/vllm/` holding model.py and utils/ as they are (Triton's vllm container
    layout); returns the backend directory."""
    backend = root / "backends" / "vllm"
    (backend / "utils").mkdir(parents=True)
    for src in SRC:
        (backend / src.removeprefix("src/")).write_bytes(_show(mirror, ref, src).encode())
    return root / "backends"


def _vllm_model(mirror: Path, ref: str, repo: Path, name: str, edit: Callable[[str], str]
                ) -> None:  # fmt: skip
    """samples/model_repository/vllm_model as `name` (its config, `backend: "vllm"`,
    unchanged), with `edit` applied to its model.json."""
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(_show(mirror, ref, f"{SAMPLE}/config.pbtxt"))
    (repo / name / "1" / "model.json").write_text(
        edit(_show(mirror, ref, f"{SAMPLE}/1/model.json"))
    )


def _show(mirror: Path, ref: str, path: str) -> str:
    content = git_show(mirror, ref, path)
    if content is None:
        raise SystemExit(f"{ref}:{path} is not in {mirror}")
    return content.decode()


def _server(repo: Path, *args: str, env_extra: dict[str, str] | None = None) -> ServeProcess:
    env = {
        **(env_extra or {}),
        "PYTHONPATH": os.pathsep.join((str(STANDINS), str(_PROJECT_ROOT))),
        # Long enough that a 1500-token answer is still running when the cancel test cancels.
        "THAW_VLLM_STANDIN_STEP_S": "0.01",
    }
    backends = repo.parent / "backends"  # install_backend's, as test.sh's --backend-directory
    ports = ("--port", "8000", "--grpc-port", "8001", "--metrics-port", "8002")
    server = ServeProcess(repo, f"--backend-directory={backends}", *ports, "--log-level", "info",
                          *args, env=env)  # fmt: skip
    server.wait_ready(timeout_s=180)
    return server


def _run_tests(root: Path, ci_dir: str, ids: list[str], ref: str, server: ServeProcess
               ) -> list[Result]:  # fmt: skip
    qa_dir = root / ci_dir
    # The cancellation test reads the server's log by this name in its directory.
    link = qa_dir / "request_cancellation_server.log"
    if not link.exists():
        link.symlink_to(server.log_path)
    report = root / "report.json"
    proc = run_unittest(qa_dir, "--out", str(report), *ids)
    if not report.exists():
        return [Result(ref, ci_dir, i, "error", proc.stderr[-300:]) for i in ids]
    rows = json.loads(report.read_text())
    results = []
    for test in ids:
        row = rows.get(test, {"outcome": "error", "detail": "no row in the report"})
        detail = str(row.get("detail", ""))[:200].replace("|", "/")
        results.append(Result(ref, ci_dir, test, str(row["outcome"]), detail))
    return results


def session_backend(mirror: Path, ref: str, root: Path, add_sub: tuple[bytes, bytes] | None
                    ) -> list[Result]:  # fmt: skip
    """vllm_backend/test.sh: explicit mode, vllm_opt loaded; load/unload, invalid models."""
    repo = root / "models_backend"
    for name, edit in (
        ("vllm_opt", lambda text: text),
        ("vllm_load_test", lambda text: text),
        ("vllm_invalid_1", lambda text: text.replace('"enforce_eager"', '"invalid_attribute"')),
        ("vllm_invalid_2", lambda text: text.replace('"facebook/opt-125m"', '"invalid_model"')),
    ):
        _vllm_model(mirror, ref, repo, name, edit)
    (repo / "ensemble_model" / "1").mkdir(parents=True)
    (repo / "ensemble_model" / "config.pbtxt").write_text(
        _show(mirror, ref, f"{CI}/vllm_backend/ensemble_config.pbtxt"))  # fmt: skip
    ids = [
        "vllm_backend_test.VLLMTritonBackendTest.test_model_with_invalid_attributes",
        "vllm_backend_test.VLLMTritonBackendTest.test_vllm_invalid_model_name",
    ]
    if add_sub is not None:
        (repo / "add_sub" / "1").mkdir(parents=True)
        (repo / "add_sub" / "1" / "model.py").write_bytes(add_sub[0])
        (repo / "add_sub" / "config.pbtxt").write_bytes(add_sub[1])
        ids.insert(0, _LOAD_TEST)
    server = _server(repo, "--model-control-mode=explicit", "--load-model=vllm_opt")
    try:
        results = _run_tests(root, f"{CI}/vllm_backend", ids, ref, server)
    finally:
        server.stop()
    if add_sub is None:
        results.append(Result(ref, "vllm_backend", _LOAD_TEST, "skipped",
                              "no python_backend mirror for add_sub"))  # fmt: skip
    return results


def session_serving(mirror: Path, ref: str, root: Path) -> list[Result]:
    """vllm_opt with REPORT_CUSTOM_METRICS: streaming, cancellation and metrics tests, then
    Thaw's own checks (OpenAI routes, /metrics, finalize on shutdown)."""
    repo = root / "models_serving"
    _vllm_model(mirror, ref, repo, "vllm_opt", lambda text: text)
    with (repo / "vllm_opt" / "config.pbtxt").open("a") as config:
        config.write(_REPORT_METRICS)
    server = _server(repo)
    results: list[Result] = []
    try:
        for ci_dir, ids in (
            (f"{CI}/enabled_stream", [
                "enabled_stream_test.VLLMTritonStreamTest.test_vllm_model_enabled_stream",
                "enabled_stream_test.VLLMTritonStreamTest."
                "test_vllm_model_enabled_stream_exclude_input_in_output_false",
            ]),
            (f"{CI}/request_cancellation", [
                "request_cancellation_test.VLLMRequestCancelTest.test_request_cancellation",
            ]),
            (f"{CI}/metrics_test", [
                "vllm_metrics_test.VLLMTritonMetricsTest.test_custom_sampling_params",
            ]),
        ):  # fmt: skip
            results += _run_tests(root, ci_dir, ids, ref, server)
        results += [_check(ref, name, fn) for name, fn in _OWN_CHECKS]
    finally:
        server.stop()
    logs = server.log_path.read_text(errors="replace")
    finalized = (
        "[vllm] Shutdown complete" in logs and "Garbage Collector on finalize... done" in logs
    )
    detail = "" if finalized else "no '[vllm] Shutdown complete' in the server's log"
    outcome = "passed" if finalized else "failed"
    results.append(Result(ref, "thaw", "finalize_on_shutdown", outcome, detail))
    return results


LORA_SEPARATOR = "_lora_"


def session_lora(mirror: Path, ref: str, root: Path) -> list[Result]:
    """`thaw serve --lora-separator`: a vllm_opt copy with vllm_backend's LoRA files
    (model.json `enable_lora`, multi_lora.json); the `openai` client selects an adapter by
    name, and vllm_backend's own model.py turns the `lora_name` Thaw sends into the engine's
    LoRARequest (the stand-in answers the adapter it was given)."""
    repo = root / "models_lora"
    enable = lambda text: json.dumps({**json.loads(text), "enable_lora": True})  # noqa: E731
    _vllm_model(mirror, ref, repo, "opt_adapters", enable)
    adapters = {"doll": str(root / "adapters" / "doll"), "sheep": str(root / "adapters" / "sheep")}
    (repo / "opt_adapters" / "1" / "multi_lora.json").write_text(json.dumps(adapters))
    server = _server(repo, f"--lora-separator={LORA_SEPARATOR}")
    try:
        return [_check(ref, "openai_lora_selected", lambda: _check_lora(adapters))]
    finally:
        server.stop()


def _check_lora(adapters: dict[str, str]) -> None:
    import openai

    client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused")
    ids = [model.id for model in client.models.list()]
    if ids != ["opt_adapters", *(f"opt_adapters{LORA_SEPARATOR}{a}" for a in adapters)]:
        raise AssertionError(f"/v1/models: {ids}")
    for number, (name, path) in enumerate(adapters.items(), 1):
        answer = client.completions.create(model=f"opt_adapters{LORA_SEPARATOR}{name}", prompt="hi")
        given = json.loads(answer.choices[0].text)
        if given != {"lora_int_id": number, "lora_path": path}:  # vllm_backend's LoRARequest
            raise AssertionError(f"{name}: the engine was given {given}")
    try:
        client.completions.create(model=f"opt_adapters{LORA_SEPARATOR}unknown", prompt="hi")
    except openai.BadRequestError as exc:
        if "Unknown LoRA: unknown; for model: opt_adapters_lora_unknown" not in str(exc):
            raise
    else:
        raise AssertionError("an unknown adapter was not refused")


# L0_check_health_vllm/test.sh's runs: ENABLE_VLLM_HEALTH_CHECK, whether vLLM's check_health
# is mocked to fail from its 2nd call (the stand-in's THAW_VLLM_STANDIN_HEALTHY_CHECKS=1), test.
HEALTH_RUNS = (
    ("true", False, "test_vllm_is_healthy"),
    ("false", True, "test_vllm_is_healthy"),
    ("true", True, "test_vllm_not_healthy"),
)


def session_health(mirror: Path, ref: str, root: Path) -> list[Result]:
    """L0_check_health_vllm: a failing engine health check unloads the model from its own
    execute (pb_utils.unload_model), answers UNAVAILABLE, and the model is gone after."""
    qa_dir = root / "ci/L0_check_health_vllm"
    results = []
    for enabled, mocked, test in HEALTH_RUNS:
        repo = root / f"models_health_{enabled}_{int(mocked)}"
        _vllm_model(mirror, ref, repo, "vllm_opt", lambda text: text)
        with (repo / "vllm_opt" / "config.pbtxt").open("a") as config:
            config.write(f'parameters: {{\n  key: "ENABLE_VLLM_HEALTH_CHECK"\n'
                         f'  value: {{ string_value: "{enabled}" }}\n}}\n')  # fmt: skip
        env = {"THAW_VLLM_STANDIN_HEALTHY_CHECKS": "1"} if mocked else {}
        server = _server(repo, "--model-control-mode=explicit", "--load-model=*", env_extra=env)
        try:
            rows = run_pytest(qa_dir, f"check_health_test.py::TestCheckHealth::{test}", {})
        finally:
            server.stop()
        row = rows.get(f"check_health_test.TestCheckHealth.{test}",
                       {"outcome": "error", "detail": "no row in the report"})  # fmt: skip
        name = f"{test} (health check {enabled}{', engine mocked to fail' if mocked else ''})"
        outcome, detail = row["outcome"], row["detail"].replace("|", "/").replace("\n", " ")
        results.append(Result(ref, "ci/L0_check_health_vllm", name, outcome, detail[:300]))
    return results


def _check(ref: str, name: str, fn: Callable[[], None]) -> Result:
    try:
        fn()
    except Exception as exc:  # a check's failure is its row, and the next check still runs
        return Result(ref, "thaw", name, "failed", f"{type(exc).__name__}: {exc}"[:200])
    return Result(ref, "thaw", name, "passed", "")


def _expected_text(prompt: str, max_tokens: int) -> str:
    """What the stand-in engine generates greedily (its own functions: the check is that
    model.py and Thaw carry it to the client unchanged)."""
    sys.path.insert(0, str(STANDINS))
    from vllm.sampling_params import SamplingParams
    from vllm.v1.engine.async_llm import next_token, piece

    params = SamplingParams(temperature=0.0)
    return "".join(piece(next_token(prompt, 0, step, params)) for step in range(max_tokens))


def check_openai_completion() -> None:
    import openai

    client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused")
    prompt = "The capital of France is"
    answer = client.completions.create(model="vllm_opt", prompt=prompt, max_tokens=8)
    choice = answer.choices[0]
    if choice.text != _expected_text(prompt, 8) or choice.finish_reason != "length":
        raise AssertionError(f"text {choice.text!r}, finish_reason {choice.finish_reason!r}")
    usage = answer.usage
    if usage is None or (usage.prompt_tokens, usage.completion_tokens) != (5, 8):
        raise AssertionError(f"usage {usage}")


def check_openai_chat_stream() -> None:
    import openai

    client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused")
    messages = [{"role": "user", "content": "hello there"}]
    whole = client.chat.completions.create(model="vllm_opt", messages=messages, max_tokens=6)
    chunks = client.chat.completions.create(model="vllm_opt", messages=messages, max_tokens=6,
                                            stream=True)  # fmt: skip
    deltas = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    if len([d for d in deltas if d]) < 2 or "".join(deltas) != whole.choices[0].message.content:
        raise AssertionError(f"deltas {deltas!r} vs {whole.choices[0].message.content!r}")


def check_openai_named_tool_guided() -> None:
    """A named tool_choice's schema reaches the engine through vllm_backend's own parsing of
    `sampling_parameters` (TritonSamplingParams.from_dict: `structured_outputs` as
    StructuredOutputsParams); the stand-in answers the schema it was given."""
    import openai

    client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused")
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": schema}}
    answer = client.chat.completions.create(
        model="vllm_opt",
        messages=[{"role": "user", "content": "weather in Dallas?"}],
        tools=[tool],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    (call,) = answer.choices[0].message.tool_calls or []
    expected = json.dumps(schema, separators=(",", ":"))
    if call.function.name != "get_weather" or call.function.arguments != expected:
        raise AssertionError(f"call {call!r}, expected the arguments {expected!r}")


def check_openai_response_format() -> None:
    """`response_format` reaches the engine through vllm_backend's own parsing of
    `structured_outputs` (a schema's text, or `json_object`); the stand-in answers what it was
    given ("{}" for any object)."""
    import openai

    client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused")
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    formats: list[tuple[Any, str]] = [
        ({"type": "json_schema", "json_schema": {"name": "city", "schema": schema}},
         json.dumps(schema, separators=(",", ":"))),
        ({"type": "json_object"}, "{}"),
    ]  # fmt: skip
    for fmt, expected in formats:
        answer = client.chat.completions.create(
            model="vllm_opt", messages=[{"role": "user", "content": "hi"}], response_format=fmt
        )
        if answer.choices[0].message.content != expected:
            raise AssertionError(f"{fmt}: {answer.choices[0].message.content!r} != {expected!r}")


def check_custom_metrics() -> None:
    with urllib.request.urlopen("http://127.0.0.1:8002/metrics", timeout=10) as reply:
        text = reply.read().decode()
    for family in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total"):
        found = re.search(rf'^{family}{{model="vllm_opt",version="1"}} (\S+)$', text, re.M)
        if found is None or float(found.group(1)) <= 0:
            raise AssertionError(f"{family} missing or zero")


_OWN_CHECKS: tuple[tuple[str, Callable[[], None]], ...] = (
    ("openai_completion", check_openai_completion),
    ("openai_chat_stream", check_openai_chat_stream),
    ("openai_named_tool_guided", check_openai_named_tool_guided),
    ("openai_response_format_guided", check_openai_response_format),
    ("custom_metrics_on_metrics_port", check_custom_metrics),
)


def run(mirror: Path, ref: str, python_backend: Path | None) -> list[Result]:
    busy = [port for port in PORTS if port_in_use(port)]
    if busy:
        raise SystemExit(f"port(s) {busy} are in use: vllm_backend's tests hard-code them")
    add_sub = None
    if python_backend is not None:
        model = git_show(python_backend, "HEAD", "examples/add_sub/model.py")
        config = git_show(python_backend, "HEAD", "examples/add_sub/config.pbtxt")
        add_sub = (model, config) if model is not None and config is not None else None
    with tempfile.TemporaryDirectory(prefix="thaw-vllm-backend-") as tmp:
        root = Path(tmp)
        extract(mirror, ref, [COMMON, f"{CI}/vllm_backend/vllm_backend_test.py",
                              f"{CI}/enabled_stream/enabled_stream_test.py",
                              f"{CI}/request_cancellation/request_cancellation_test.py",
                              f"{CI}/metrics_test/vllm_metrics_test.py",
                              "ci/L0_check_health_vllm/check_health_test.py"], root)  # fmt: skip
        install_backend(mirror, ref, root)
        started = time.monotonic()
        results = session_backend(mirror, ref, root, add_sub)
        results += session_serving(mirror, ref, root)
        results += session_health(mirror, ref, root)
        results += session_lora(mirror, ref, root)
        print(f"ran in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return results + [Result(ref, "vllm_backend", t, "deselected", why)
                      for t, why in DESELECTED.items()]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--mirror", type=Path,
                        default=os.environ.get("TRITON_VLLM_BACKEND_MIRROR") or None)  # fmt: skip
    parser.add_argument("--ref", default="HEAD")
    parser.add_argument("--python-backend-mirror", type=Path,
                        default=os.environ.get("TRITON_PYTHON_BACKEND_MIRROR") or None)  # fmt: skip
    args = parser.parse_args(argv)
    if args.mirror is None or git_show(args.mirror, args.ref, "src/model.py") is None:
        print(f"skipped: no vllm_backend mirror at {str(args.mirror)!r} "
              "(--mirror / $TRITON_VLLM_BACKEND_MIRROR)", file=sys.stderr)  # fmt: skip
        return 0
    if importlib.util.find_spec("PIL") is None:
        # vllm_backend's utils/request.py imports it (vLLM installs it); not Thaw's to stand in.
        raise SystemExit("vllm_backend's utils/request.py needs Pillow: pip install pillow")
    results = run(args.mirror, args.ref, args.python_backend_mirror)
    print_results(results)
    selected = [r for r in results if r.outcome not in ("deselected", "skipped")]
    ok = ("passed",)
    return 0 if selected and all(r.outcome in ok for r in selected) else 1


if __name__ == "__main__":
    sys.exit(main())
