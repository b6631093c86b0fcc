"""Triton's qa/L0_model_config as a suite of tests.conformance.triton_qa: one server start per
test.sh case, one row each, named after the case directory.

    cli_messages/<case>           the server's log holds the case's `expected` text (grep)
    special_cases/<case>          refused; an error line holds one `expected*` text
    noautofill_platform/<case> [<platform>, <flag>]
                                  the case's config with test.sh's `platform:` appended, run
                                  with `--strict-model-config=true` and again with
                                  `--disable-auto-complete-config`: refused, as above
    autofill_noplatform/<backend>/<case>          `--strict-model-config=false`: refused
    autofill_noplatform_success/<backend>/<case>  started, and compare_status.py (Triton's,
                                  unchanged) finds the completed config equal to an `expected*`

Each case's repository is built as test.sh builds it (tests/fixtures/triton_qa_model_config_repos
.py). test.sh's checks, and where they are read differently here:

- "refused": tritonserver's `--exit-on-error` is true by default and Thaw's is false (Thaw
  serves the models that load), so every run passes `--exit-on-error=true`, the flag that makes
  `thaw serve` refuse its start for a model that fails to load, as tritonserver does, and
  `thaw up` for a model whose config its repository's read (or, for a Python model's own
  `auto_complete_config`, a replica at start) refuses.
- test.sh greps `^E[0-9][0-9][0-9][0-9].*"$EX"` (an error line in glog's form); Thaw's log lines
  have its own form, so the expected text (a grep basic regular expression, each of its lines a
  pattern, as grep reads it) is searched on any line of the log.

Left out, as rows with the reason: the backends Thaw does not have (TensorFlow savedmodel /
graphdef, TensorRT, OpenVINO, Triton's custom backends), the TensorFlow / TensorRT trials of
noautofill_platform, special_cases/noautofill_noconfig with noautofill_test.py (a graphdef
model), the ensemble cases whose composing models run on Triton's C++ test backends
(`identity`, `repeat`), and the completed-config cases whose every `expected*` was written on a
machine with a GPU (instances `KIND_GPU` on GPU 0) when this machine has none.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.conformance.qa_checkout import Result, git_show
from tests.conformance.qa_servers import refusal, start, unsupported
from tests.conformance.qa_suite import Suite, SuiteRun
from tests.fixtures.triton_qa_model_config_repos import (
    QA_DIR,
    build_case,
    case_files,
    cases,
    version_dirs,
)
from tests.fixtures.triton_qa_suite_repos import Mirror

__all__ = ["MODEL_CONFIG_SUITE", "bre_to_python", "grep_found"]

_NO_BACKEND = "left out: no backend ({})"
# autofill_noplatform{,_success}/<dir>: the backend Thaw lacks, by directory.
_MISSING_BACKENDS = {
    "tensorflow_savedmodel": "TensorFlow",
    "tensorflow_graphdef": "TensorFlow",
    "tensorrt": "TensorRT",
    "openvino": "OpenVINO",
    "custom": "Triton's custom backends",
}
# test.sh's TRIALS: the platform appended to each noautofill_platform config.
_TRIALS = {
    "tensorflow_savedmodel": "TensorFlow",
    "tensorflow_graphdef": "TensorFlow",
    "tensorrt_plan": "TensorRT",
    "onnxruntime_onnx": "",
    "pytorch_libtorch": "",
}
_NOAUTOFILL_FLAGS = ("--strict-model-config=true", "--disable-auto-complete-config")
_SPECIAL_FLAGS = {"invalid_platform": ("--disable-auto-complete-config",)}
_CLI_FLAGS = {
    "cli_override": ("--disable-auto-complete-config", "--strict-model-config=false"),
    "cli_deprecation": ("--strict-model-config=true",),
}
_GRAPHDEF = "left out: no backend (TensorFlow: a graphdef model)"
# Triton refuses the start for a model that fails to load; Thaw's default serves the others.
_EXIT_ON_ERROR = "--exit-on-error=true"
# Triton's completed configs for a machine with a GPU: what it completes on this one differs.
_HAVE_GPU = Path("/dev/nvidia0").exists()
_GPU_EXPECTED = (
    "left out: GPU (every expected config was written on a machine with one: instances "
    "KIND_GPU on GPU 0)"
)
_PLATFORM_LINE = re.compile(r"^.*platform:.*\n?", re.MULTILINE)


def bre_to_python(pattern: str) -> str:
    """A grep basic regular expression as Python's `re`: `.`, `*`, `[...]`, `^`, `$` and `\\`
    keep their meaning; `( ) { } + ? |` are literal in a BRE."""
    out = []
    escaped = False
    for char in pattern:
        if escaped:
            out.append(re.escape(char) if char not in "(){}+?|" else char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in "(){}+?|":
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def grep_found(expected: str, log: str) -> bool:
    """`grep "$EX"` on the log: each line of the expected text is a pattern; any matches."""
    patterns = [re.compile(bre_to_python(p)) for p in expected.split("\n") if p]
    return any(p.search(line) for p in patterns for line in log.splitlines())


class _Context:
    """One run of the suite: the mirror, the case files read from it, the rows."""

    def __init__(self, run: SuiteRun) -> None:
        self.run = run
        self.mirror = Mirror(lambda path: self._read(path))
        test_sh = self._read(f"{QA_DIR}/test.sh").decode()
        self.versions = version_dirs(test_sh)
        self.models = run.qa_dir / "models"
        self.results: list[Result] = []

    def _read(self, path: str) -> bytes:
        content = git_show(self.run.mirror, self.run.ref, path)
        if content is None:
            raise SystemExit(f"{self.run.ref}:{path} is not in {self.run.mirror}")
        return content

    def row(self, test: str, outcome: str, detail: str = "") -> None:
        detail = " ".join(detail.split())[:600]
        self.results.append(Result(self.run.label, "test.sh", test, outcome, detail))

    def build(self, case: str) -> Path:
        files = case_files(self.run.mirror, self.run.ref, case)
        return build_case(self.models, self.mirror, case, files, versions=self.versions)

    def expecteds(self, model_dir: Path) -> list[str]:
        """test.sh's `ls $EXPECTEDS`, each file as `cat` gives it in backticks."""
        return [path.read_text().rstrip("\n") for path in sorted(model_dir.glob("expected*"))]

    def refused(self, test: str, args: tuple[str, ...], expecteds: list[str]) -> None:
        """test.sh's "we expect all the tests to fail with one of the expected messages"."""
        args = (*args, _EXIT_ON_ERROR)
        flag = unsupported(self.run.kind, args)
        if flag is not None:
            self.row(test, "error", f"thaw {self.run.kind} has no {flag}")
            return
        started, log = refusal(self.run.kind, self.models, args)
        if started:
            self.row(test, "failed", f"thaw {self.run.kind} started")
        elif any(grep_found(ex, log) for ex in expecteds):
            self.row(test, "passed")
        else:
            said = [line for line in log.splitlines() if "ERROR" in line or "failed" in line]
            self.row(test, "failed", f"log lacks {expecteds[:1]!r}: {(said or [''])[-1][-160:]}")

    def completed(self, test: str, case_dir: Path, model: str, args: tuple[str, ...]) -> None:
        """test.sh's started server and `compare_status.py --expected_dir models/M --model M`."""
        expected = [path.read_text() for path in case_dir.glob("expected*")]
        if not _HAVE_GPU and expected and all("KIND_GPU" in text for text in expected):
            self.row(test, "deselected", _GPU_EXPECTED)
            return
        args = (*args, _EXIT_ON_ERROR)
        flag = unsupported(self.run.kind, args)
        if flag is not None:
            self.row(test, "error", f"thaw {self.run.kind} has no {flag}")
            return
        try:
            server = start(self.run.kind, self.models, args)
        except RuntimeError as exc:
            last = str(exc).strip().splitlines()[-1][:200]
            self.row(test, "failed", f"thaw {self.run.kind} did not start: {last}")
            return
        try:
            proc = subprocess.run(
                [sys.executable, "compare_status.py", "--expected_dir",
                 str(case_dir.relative_to(self.run.qa_dir)), "--model", model],
                cwd=self.run.qa_dir, capture_output=True, text=True, check=False, timeout=120,
            )  # fmt: skip
        finally:
            server.stop()
        if proc.returncode == 0:
            self.row(test, "passed")
        else:
            self.row(test, "failed", (proc.stdout + proc.stderr)[-1500:])


def _cli_messages(ctx: _Context) -> None:
    for case in cases(ctx.run.mirror, ctx.run.ref, "cli_messages"):
        name = case.rsplit("/", 1)[-1]
        ctx.build(case)
        # test.sh expects the start refused (a model directory with no config nor version)
        # and greps the whole log, not only error lines.
        ctx.refused(case, _CLI_FLAGS.get(name, ()), ctx.expecteds(ctx.models / name))


def _special_cases(ctx: _Context) -> None:
    for case in cases(ctx.run.mirror, ctx.run.ref, "special_cases"):
        name = case.rsplit("/", 1)[-1]
        if name == "noautofill_noconfig":
            ctx.row(case, "deselected", _GRAPHDEF)
            ctx.row("noautofill_test.py", "deselected", _GRAPHDEF)
            continue
        # invalid_platform: test.sh copies a savedmodel into it; its config's platform is
        # refused before any model file is read, so the case runs without one.
        model_dir = ctx.build(case)
        ctx.refused(case, _SPECIAL_FLAGS.get(name, ()), ctx.expecteds(model_dir))


def _noautofill(ctx: _Context) -> None:
    for flag in _NOAUTOFILL_FLAGS:
        for trial, missing in _TRIALS.items():
            for case in cases(ctx.run.mirror, ctx.run.ref, "noautofill_platform"):
                test = f"{case} [{trial}, {flag}]"
                if missing:
                    ctx.row(test, "deselected", _NO_BACKEND.format(missing))
                    continue
                model_dir = ctx.build(case)
                config = model_dir / "config.pbtxt"
                if config.is_file():  # test.sh's `sed -i '/platform:/d'` and its append
                    text = _PLATFORM_LINE.sub("", config.read_text())
                    config.write_text(text + f'platform: "{trial}"\n')
                ctx.refused(test, (flag,), ctx.expecteds(model_dir))


def _autofill(ctx: _Context, group: str) -> None:
    for backend_dir in cases(ctx.run.mirror, ctx.run.ref, group):
        backend = backend_dir.rsplit("/", 1)[-1]
        for case in cases(ctx.run.mirror, ctx.run.ref, backend_dir):
            if backend in _MISSING_BACKENDS:
                ctx.row(case, "deselected", _NO_BACKEND.format(_MISSING_BACKENDS[backend]))
                continue
            model_dir = ctx.build(case)
            stand_in = _test_backend(ctx.models) if backend == "ensemble" else ""
            if stand_in:
                ctx.row(case, "deselected", _NO_BACKEND.format(stand_in))
                continue
            args = ("--strict-model-config=false",)
            if group == "autofill_noplatform":
                # EXPECTEDS: the model's own when the case is one model, else the repository's.
                ctx.refused(case, args, ctx.expecteds(model_dir))
            else:
                name = case.rsplit("/", 1)[-1]
                ctx.completed(case, ctx.models / name, name, args)


_TEST_BACKEND = re.compile(r'^\s*backend:\s*"(identity|repeat)"', re.MULTILINE)


def _test_backend(models: Path) -> str:
    """What an ensemble case's composing models need that Thaw has not: Triton's C++ test
    backends (`identity`, `repeat`), or ""."""
    for config in sorted(models.glob("*/config.pbtxt")):
        match = _TEST_BACKEND.search(config.read_text())
        if match:
            return f"its composing models run on Triton's C++ `{match.group(1)}` test backend"
    return ""


def run_model_config(run: SuiteRun) -> list[Result]:
    """Every case of test.sh, in its order: one row each."""
    ctx = _Context(run)
    _cli_messages(ctx)
    _special_cases(ctx)
    _noautofill(ctx)
    _autofill(ctx, "autofill_noplatform")
    _autofill(ctx, "autofill_noplatform_success")
    return ctx.results


MODEL_CONFIG_SUITE = Suite(
    "L0_model_config", ("compare_status.py",), {}, (), runner=run_model_config
)
