"""Triton's L0_model_namespacing as a suite of tests.conformance.triton_qa.

test.sh starts the server once per test and control mode, on a fresh copy of the test's two
repositories (`addsub_repo`, `subadd_repo`; every model directory given a version `1`), with
`--model-namespacing=true`, both repositories, and POLL (every 2 s) or EXPLICIT mode; then runs
`test.py ModelNamespace{Poll,Explicit}.<test>`, whose composing Python models import
qa/L0_model_namespacing/python_addsub (`TRITON_QA_PYTHON_MODEL_DIR`, the server's
environment). Each run here gets its own copy (`poll_<test>`, `explicit_<test>`), as test.sh's
`cp -r <test> test_dir`: test_dynamic_resolution moves a model out of its repository and back.
`thaw up` serves one repository and has no `--model-namespacing`: its rows say so.
"""

from __future__ import annotations

import shutil
from functools import partial
from pathlib import Path

from tests.conformance.qa_suite import RepoBuilder, Run, Suite
from tests.fixtures.triton_qa_suite_repos import Mirror

__all__ = ["NAMESPACING_SUITES"]

_TESTS = ("test_duplication", "test_dynamic_resolution", "test_ensemble_duplication",
          "test_no_duplication")  # fmt: skip
# Each test's repositories: (repository, model, file) under qa/L0_model_namespacing/<test>.
_MODELS = {
    "test_duplication": (("addsub_repo", "composing_model"), ("addsub_repo", "simple_addsub"),
                         ("subadd_repo", "composing_model"), ("subadd_repo", "simple_subadd")),
    "test_dynamic_resolution": (("addsub_repo", "composing_model"),
                                ("addsub_repo", "simple_addsub"),
                                ("subadd_repo", "composing_model"),
                                ("subadd_repo", "simple_subadd")),
    "test_ensemble_duplication": (("addsub_repo", "composing_addsub"),
                                  ("addsub_repo", "simple_ensemble"),
                                  ("subadd_repo", "composing_subadd"),
                                  ("subadd_repo", "simple_ensemble")),
    "test_no_duplication": (("addsub_repo", "composing_addsub"), ("addsub_repo", "simple_addsub"),
                            ("subadd_repo", "composing_subadd"), ("subadd_repo", "simple_subadd")),
}  # fmt: skip
_MODES = {
    "poll": ("ModelNamespacePoll", ("--model-control-mode=POLL", "--repository-poll-secs=2")),
    "explicit": ("ModelNamespaceExplicit", ("--model-control-mode=EXPLICIT",)),
}


def _files() -> tuple[str, ...]:
    files = ["test.py", "python_addsub/__init__.py", "python_subadd/__init__.py"]
    for test, models in _MODELS.items():
        for repo, model in models:
            # A Python model has only its model.py (its config is auto-completed); an
            # ensemble only its config.pbtxt.
            leaf = "1/model.py" if model.startswith("composing") else "config.pbtxt"
            files.append(f"{test}/{repo}/{model}/{leaf}")
    return tuple(files)


def _copy_test(dest: Path, mirror: Mirror, *, test: str) -> Path:
    """test.sh's `cp -r <test> test_dir`, after its `mkdir -p <model>/1` for every model."""
    shutil.copytree(dest.parent / test, dest)
    for model_dir in dest.glob("*/*"):
        (model_dir / "1").mkdir(exist_ok=True)
    return dest


def _repos() -> dict[str, RepoBuilder]:
    return {f"{mode}_{test}": partial(_copy_test, test=test) for mode in _MODES for test in _TESTS}


def _runs() -> tuple[Run, ...]:
    runs = []
    for mode, (suite, flags) in _MODES.items():
        for test in _TESTS:
            test_dir = f"{{qa_dir}}/{mode}_{test}"
            env = (
                ("TRITON_QA_ROOT_DIR", "{qa_dir}/.."),
                ("TRITON_QA_PYTHON_MODEL_DIR", "{qa_dir}"),
                ("PYTHONDONTWRITEBYTECODE", "1"),
            )
            runs.append(
                Run(
                    f"test.{suite}.{test}",
                    f"{mode}_{test}/addsub_repo",
                    ("--model-namespacing=true", f"--model-repository={test_dir}/subadd_repo",
                     *flags),
                    env=(*env, ("NAMESPACE_TESTING_DIRCTORY", test_dir)),
                    server_env=env,
                    label=mode,
                )
            )  # fmt: skip
    return tuple(runs)


NAMESPACING_SUITES = (Suite("L0_model_namespacing", files=_files(), repos=_repos(), runs=_runs()),)
