"""Triton's QA suites of model lifecycle and server options (response cache, ...), as suites of
tests.conformance.triton_qa. Repositories: tests/fixtures/triton_qa_cache_repos.py.

    L0_response_cache   test.sh's server starts of the local cache: refused for a decoupled model
                        (and an ensemble that is, or has a decoupled step) with the cache on,
                        started with either spelling of the cache flag, refused with both or two
                        caches; then ensemble_cache_test.py, one server start per test as
                        test.sh runs it. Left out: its gtest unit test (`response_cache_test`,
                        a C++ binary of Triton's cache library) and the Redis cache's runs
                        (Thaw has the local cache only: `--cache-config redis,...` is refused)
    L0_warmup           test.sh's server starts with `--log-verbose=1`, each a script row
                        grepping the server's log as test.sh does: per backend (onnx, libtorch)
                        a stateless and a sequence model's samples, ONNX's string samples, a
                        failing sample refusing the start, a decoupled model's sample. Left out:
                        graphdef/savedmodel/plan (no TensorFlow / TensorRT), the graphdef-only
                        inception run, and the last run (a KIND_GPU ONNX model beside
                        bls_onnx_warmup, after test.sh reinstalls torch 1.13+cu117)
"""

from __future__ import annotations

from functools import partial

from tests.conformance.qa_suite import RepoBuilder, Run, Suite
from tests.fixtures.triton_qa_cache_repos import CHECK_SCRIPT, ENSEMBLE, build_response_cache_repo
from tests.fixtures.triton_qa_warmup_repos import (
    build_warmup_python_repo,
    build_warmup_repo,
    build_warmup_string_repo,
)

__all__ = ["LIFECYCLE_SUITES"]

_LOAD_IDENTITY = ("--model-control-mode=explicit", "--load-model=identity_cache")
# The refusal Thaw prints for a decoupled model with the cache on (test.sh greps
# "response cache does not currently support" and "decoupled", any case).
_DECOUPLED_REFUSAL = "Response cache does not currently support decoupled"


def _decoupled_refusal(label: str, repo: str, model: str) -> Run:
    return Run(
        label,
        repo,
        (
            "--cache-config", "local,size=10480",
            "--model-control-mode=explicit", f"--load-model={model}",
        ),
        refusal=_DECOUPLED_REFUSAL,
    )  # fmt: skip


def _started(label: str, *flags: str) -> Run:
    return Run(
        CHECK_SCRIPT, "models", (*flags, *_LOAD_IDENTITY), label=label,
        script_args=("--ready", "identity_cache"),
    )  # fmt: skip


_ENSEMBLE_TESTS = (
    ("test_ensemble_top_level_response_cache", "10840"),
    ("test_ensemble_all_models_cache_enabled", "10840"),
    ("test_ensemble_composing_model_cache_enabled", "10840"),
    ("test_ensemble_cache_insertion_failure", "200"),
)


def _response_cache_runs() -> tuple[Run, ...]:
    return (
        _decoupled_refusal("decoupled model with the cache refused", "models", "decoupled_cache"),
        _started("--response-cache-byte-size=8192", "--response-cache-byte-size=8192"),
        _started("--cache-config=local,size=8192", "--cache-config=local,size=8192"),
        Run(
            "two cache configurations refused",
            "models",
            ("--cache-config=local,size=8192", "--cache-config=redis,key=value", *_LOAD_IDENTITY),
            refusal="multiple cache configurations",
        ),
        Run(
            "both cache flags refused",
            "models",
            (
                "--response-cache-byte-size=12345",
                "--cache-config=local,size=67890",
                *_LOAD_IDENTITY,
            ),
            refusal="Incompatible flags --response-cache-byte-size and --cache-config",
        ),
        _decoupled_refusal(
            "decoupled ensemble with the cache refused", "models/ensemble_cache_decoupled", ENSEMBLE
        ),
        _decoupled_refusal(
            "ensemble with the cache, decoupled step, refused",
            "models/ensemble_cache_composing_decoupled",
            ENSEMBLE,
        ),
        *(
            Run(
                f"ensemble_cache_test.EnsembleCacheTest.{test}",
                "models/ensemble_models",
                (f"--cache-config=local,size={size}", "--model-control-mode=explicit"),
            )
            for test, size in _ENSEMBLE_TESTS
        ),
    )


_WARMUP_ARGS = ("--log-verbose=1", "--exit-timeout-secs=120")
_SERVER_LOG = "inference_server.log"
_NO_WARMUP_ERROR = ("--absent", "failed to run warmup")
_WARMUP_BACKENDS = ("onnx", "libtorch")


def _log_check(repo: str, label: str, *samples: str) -> Run:
    """test.sh's `grep "is running warmup sample '<sample>'" $SERVER_LOG` for each sample, and
    no "failed to run warmup"."""
    greps = tuple(f"is running warmup sample '{sample}" for sample in samples)
    return Run(
        CHECK_SCRIPT, repo, _WARMUP_ARGS, label=label, server_log=_SERVER_LOG,
        script_args=("--log", _SERVER_LOG, "--grep", *greps, *_NO_WARMUP_ERROR),
    )  # fmt: skip


def _warmup_runs() -> tuple[Run, ...]:
    runs = [
        _log_check(
            f"models_{backend}",
            f"{backend} stateless and sequence samples",
            "regular sample'",
            "sequence sample' for iteration 1",
            "sequence sample' for iteration 2",
        )
        for backend in _WARMUP_BACKENDS
    ]
    runs.append(
        _log_check(
            "strings_onnx",
            "onnx string samples",
            "zero string stateless'",
            "random string stateless'",
            "string statefull'",
        )
    )
    runs.append(
        Run(
            "failing warm-up sample refuses the start",
            "failing_infer",
            _WARMUP_ARGS,
            refusal="failed to run warmup sample 'zero sample': An Error Occurred;",
        )
    )
    runs.append(_log_check("decoupled", "decoupled model's sample", "decoupled sample'"))
    return tuple(runs)


def _warmup_repos() -> dict[str, RepoBuilder]:
    repos: dict[str, RepoBuilder] = {
        f"models_{b}": partial(build_warmup_repo, backend=b) for b in _WARMUP_BACKENDS
    }
    repos["strings_onnx"] = build_warmup_string_repo
    for name in ("failing_infer", "decoupled"):
        repos[name] = partial(build_warmup_python_repo, name=name)
    return repos


LIFECYCLE_SUITES = (
    Suite(
        "L0_response_cache",
        ("ensemble_cache_test.py",),
        {"models": build_response_cache_repo},
        _response_cache_runs(),
    ),
    Suite("L0_warmup", (), _warmup_repos(), _warmup_runs()),
)
