"""`thaw up` takes tritonserver's repository and readiness flags as `thaw serve` does:
`--model-repository` (repeatable; one index, a name in two repositories unavailable),
`--load-model=*`, `--strict-readiness`, `--strict-model-config` / `--disable-auto-complete-config`;
`--model-namespacing=true` makes each repository a namespace (--scaler local only)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from activator.config import ActivatorConfig, BoundAddresses, ScaleSettings
from activator.errors import ActivationFailed, ConfigError
from activator.fleet.model_settings import apply_model_settings
from activator.fleet.repository import Repository
from activator.process import cli as up_cli
from activator.process.repository_cli import (
    check_startup_models,
    models_loaded_at_start,
    models_to_wake,
    refusal_text,
    refused_at_start,
    start_warnings,
)
from activator.process.serving import LoadAtStartError, _complete_at_start
from activator.scaler.local.backend import fork_server_argv, replica_argv, serve_args
from activator.scaler.local_config import LocalConfig
from activator.surfaces.answers import server_live, server_ready
from runtime.process import cli as serve_cli
from tests.fixtures.models import make_add_sub, write_config
from tests.fixtures.onnx_models import make_onnx_add

_ROOT = Path(__file__).resolve().parents[3]


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    up_cli.register(parser.add_subparsers())
    return parser.parse_args(["up", *argv])


def _config(*argv: str) -> ActivatorConfig:
    return up_cli.build_config(_args(*argv))


def test_model_repository_is_repeatable_beside_repo(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    config = _config(str(a), f"--model-repository={b}", "--model-repository", str(c))
    assert config.repositories == (a, b, c)
    # tritonserver's spelling alone, and its older `--model-store`
    assert _config(f"--model-repository={b}", f"--model-store={c}").repositories == (b, c)


def test_one_directory_named_twice_is_one_repository(tmp_path: Path) -> None:
    config = _config(str(tmp_path), f"--model-repository={tmp_path}/")
    assert config.repositories == (tmp_path,)


def test_no_repository_is_refused_in_thaw_serves_words() -> None:
    with pytest.raises(ConfigError, match="no model repository: give REPO or --model-repository"):
        _config()


def test_several_repositories_need_the_local_scaler(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="several model repositories need --scaler local"):
        _config(str(tmp_path), f"--model-repository={tmp_path / 'b'}", "--scaler", "kubernetes")


def test_model_namespacing_is_taken_with_the_local_scaler(tmp_path: Path) -> None:
    b = tmp_path / "b"
    assert _config(
        str(tmp_path), f"--model-repository={b}", "--model-namespacing=true"
    ).model_namespacing
    assert not _config(str(tmp_path), "--model-namespacing=false").model_namespacing  # as given
    assert not _config(str(tmp_path)).model_namespacing  # tritonserver's default
    with pytest.raises(ConfigError, match="--model-namespacing=true needs --scaler local"):
        _config(str(tmp_path), "--model-namespacing=true", "--scaler", "kubernetes")


def test_namespaced_replicas_resolve_ensemble_steps_themselves(tmp_path: Path) -> None:
    # With namespacing an ensemble's steps run in its replica (`thaw serve
    # --model-namespacing`, which resolves them in the ensemble's namespace first), not
    # behind the front door, where a name two namespaces hold is refused.
    a, b = tmp_path / "a", tmp_path / "b"
    config = _config(str(a), f"--model-repository={b}", "--model-namespacing=true")
    bound = BoundAddresses(8000, None, front_door_url="http://127.0.0.1:8000")
    argv = serve_args(config, LocalConfig(), bound)
    assert "--model-namespacing=true" in argv
    assert "--ensemble-steps-url" not in argv
    parser = argparse.ArgumentParser()
    serve_cli.register(parser.add_subparsers())
    served = serve_cli.build_config(parser.parse_args(["serve", *argv]))
    assert served.model_namespacing and served.repositories == (a, b)
    assert served.ensemble_steps_url is None
    plain = serve_args(_config(str(a), f"--model-repository={b}"), LocalConfig(), bound)
    assert "--model-namespacing=true" not in plain and "--ensemble-steps-url" in plain


def test_strict_readiness_is_a_triton_boolean(tmp_path: Path) -> None:
    assert _config(str(tmp_path)).strict_readiness is True
    assert _config(str(tmp_path), "--strict-readiness=false").strict_readiness is False
    assert _config(str(tmp_path), "--strict-readiness", "1").strict_readiness is True
    with pytest.raises(SystemExit):
        _args(str(tmp_path), "--strict-readiness=maybe")


def test_strict_model_config_is_the_older_name_of_no_auto_complete(tmp_path: Path) -> None:
    assert _config(str(tmp_path)).auto_complete_config is True
    assert _config(str(tmp_path), "--strict-model-config=true").auto_complete_config is False
    assert _config(str(tmp_path), "--strict-model-config=false").auto_complete_config is True
    assert _config(str(tmp_path), "--disable-auto-complete-config").auto_complete_config is False


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        ((), []),
        (("--disable-auto-complete-config",), []),
        (("--strict-model-config=true",), ["has been deprecated!"]),
        (
            ("--disable-auto-complete-config", "--strict-model-config=false"),
            ["has been deprecated!", "from False to True in favor of"],
        ),
    ],
)
def test_strict_model_config_warns_as_thaw_serve(
    tmp_path: Path, argv: tuple[str, ...], said: list[str]
) -> None:
    warnings = start_warnings(_args(str(tmp_path), *argv))
    assert len(warnings) == len(said)
    for warning, fragment in zip(warnings, said, strict=True):
        assert warning.startswith("Warning: ") and fragment in warning


def test_load_model_star_is_every_servable_model() -> None:
    assert models_to_wake(("*",), ["a", "b"]) == ("a", "b")
    assert models_to_wake(("b", "b"), ["a", "b"]) == ("b",)
    # an unavailable model may be named (its wake fails, refusing the start, as tritonserver's)
    check_startup_models(("c",), explicit=True, servable=["a"], unavailable={"c"})
    check_startup_models(("*",), explicit=True, servable=["a"], unavailable=set())


def test_exit_on_error_true_refuses_the_start_for_each_model_the_start_loads() -> None:
    """`thaw serve --exit-on-error=true`'s words: every refused model, with its reason."""

    def _refusal(unavailable: dict[str, str], **flags: Any) -> str | None:
        refused = refused_at_start(unavailable, **flags)
        return refusal_text(refused) if refused else None

    refused = {"b": "b/config.pbtxt: why b", "a": "a/config.pbtxt: why a"}
    words = "failed to load all models: a: a/config.pbtxt: why a; b: b/config.pbtxt: why b"
    assert _refusal(refused, exit_on_error=True, explicit=False, load_models=()) == words
    assert _refusal(refused, exit_on_error=True, explicit=True, load_models=("*",)) == words
    # Explicit mode: only the models `--load-model` names are loaded at start.
    assert (
        _refusal(refused, exit_on_error=True, explicit=True, load_models=("b",))
        == "failed to load all models: b: b/config.pbtxt: why b"
    )
    assert _refusal(refused, exit_on_error=True, explicit=True, load_models=()) is None
    # Thaw's default (not given) and false: the model is unavailable, the others are served.
    for exit_on_error in (None, False):
        assert (
            _refusal(refused, exit_on_error=exit_on_error, explicit=False, load_models=()) is None
        )
    assert _refusal({}, exit_on_error=True, explicit=False, load_models=()) is None


def test_the_models_loaded_at_start_are_every_one_or_the_load_model_ones() -> None:
    servable = ["a", "b", "c"]
    assert models_loaded_at_start((), explicit=False, servable=servable) == ("a", "b", "c")
    assert models_loaded_at_start(("*",), explicit=True, servable=servable) == ("a", "b", "c")
    assert models_loaded_at_start(("c", "a"), explicit=True, servable=servable) == ("a", "c")
    assert models_loaded_at_start((), explicit=True, servable=servable) == ()


class _Configs:
    """A fleet's ReplicaConfigs whose replicas refuse the models in `refused`."""

    def __init__(self, refused: dict[str, str]) -> None:
        self.refused = refused
        self.asked: list[str] = []

    async def completed(self, entry: Any, endpoint: Any, version: str | None) -> None:
        self.asked.append(entry.name)
        if entry.name in self.refused:
            raise ActivationFailed(self.refused[entry.name])


@dataclass
class _ConfigFleet:
    replica_configs: _Configs
    loading_at_start: bool = False

    def endpoint(self, name: str) -> str:
        return name


async def test_exit_on_error_true_asks_a_replica_for_python_completed_configs(
    tmp_path: Path,
) -> None:
    """Only the configs a replica completes (a model.py with `auto_complete_config`) are
    asked at start; the first refused one refuses the start, its reason in thaw serve's
    words; the others stay at zero."""
    hooked = "class TritonPythonModel:\n    def auto_complete_config(c):\n        return c\n"
    for name in ("hook_a", "hook_b"):
        write_config(make_add_sub(tmp_path, name), 'backend: "python"\n')
        (tmp_path / name / "1" / "model.py").write_text(hooked)
    make_add_sub(tmp_path, "plain")
    repository = Repository.scan(tmp_path, ScaleSettings())
    fleet = _ConfigFleet(_Configs({"hook_b": "why b"}))
    with pytest.raises(LoadAtStartError, match=r"^failed to load all models: hook_b: why b$"):
        await _complete_at_start(fleet, repository, repository.names())
    assert fleet.replica_configs.asked == ["hook_a", "hook_b"]
    ok = _ConfigFleet(_Configs({}))
    await _complete_at_start(ok, repository, ["plain", "hook_a"])
    assert ok.replica_configs.asked == ["hook_a"] and not ok.loading_at_start


@pytest.mark.parametrize(
    ("names", "words"),
    [
        (("*", "a"), "Wildcard model name '*' must be the ONLY startup model if specified at all."),
        (("",), "Invalid model name"),
        (("ghost",), "failed to poll model 'ghost': model not found in any model repository"),
        (("..",), "failed to poll model '..': model not found in any model repository"),
    ],
)
def test_load_model_refusals_are_tritonservers(names: tuple[str, ...], words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_startup_models(names, explicit=True, servable=["a"], unavailable=set())
    assert caught.value.message == words


def test_model_control_mode_takes_any_case_as_tritonserver(tmp_path: Path) -> None:
    assert _config(str(tmp_path), "--model-control-mode=EXPLICIT").model_control is True
    assert _config(str(tmp_path), "--model-control-mode", "None").model_control is False


def test_load_model_outside_explicit_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="requires setting '--model-control-mode=explicit'"):
        _config(str(tmp_path), "--load-model=*")


def test_replicas_and_the_fork_server_read_every_repository(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    config = _config(str(a), f"--model-repository={b}", "--strict-model-config=true")
    local = LocalConfig()
    for argv in (serve_args(config, local), replica_argv(config, local)):
        assert str(a) in argv
        assert f"--model-repository={b}" in argv
        assert "--disable-auto-complete-config" in argv
    assert f"--model-repository={b}" in fork_server_argv(config, local)
    # ... and `thaw serve` reads them as given
    parser = argparse.ArgumentParser()
    serve_cli.register(parser.add_subparsers())
    served = serve_cli.build_config(parser.parse_args(["serve", *serve_args(config, local)]))
    assert served.repositories == (a, b)
    assert served.auto_complete_config is False


def test_the_models_of_several_repositories_are_one_index(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    make_add_sub(a, "only_a")
    make_add_sub(a, "twice")
    make_add_sub(b, "only_b")
    make_add_sub(b, "twice")
    repository = Repository.scan((a, b), ScaleSettings())
    assert repository.names() == ["only_a", "only_b"]
    assert repository.get("only_b").directory == b / "only_b"
    reason = repository.unavailable["twice"]
    assert reason == (
        f"model 'twice' is in more than one model repository (--model-repository #1: {a}; "
        f"#2: {b}): a model name must be unique across all model repositories"
    )


def test_a_missing_repository_among_several_is_refused(tmp_path: Path) -> None:
    make_add_sub(tmp_path / "a", "m")
    with pytest.raises(ConfigError, match="is not a directory"):
        Repository.scan((tmp_path / "a", tmp_path / "missing"), ScaleSettings())


@dataclass
class _Repository:
    start_error: str | None = None


@dataclass
class _Fleet:
    """What server_ready and server_live read of a Fleet."""

    config: ActivatorConfig
    primed: bool = True
    loading_at_start: bool = False
    repository: _Repository = field(default_factory=_Repository)

    def ready(self) -> bool:
        return self.primed


@pytest.mark.parametrize(
    ("strict", "primed", "loading", "ready"),
    [
        (True, True, False, True),
        (True, False, False, False),  # the warm pool not primed yet
        (True, True, True, False),  # --load-model still waking
        (False, False, True, True),  # ready once it answers
    ],
)
def test_server_readiness_follows_strict_readiness(
    tmp_path: Path, strict: bool, primed: bool, loading: bool, ready: bool
) -> None:
    config = ActivatorConfig(repository=tmp_path, strict_readiness=strict)
    fleet: Any = _Fleet(config, primed=primed, loading_at_start=loading)
    assert server_ready(fleet) is ready
    assert server_live(fleet) is True


@pytest.mark.parametrize("strict", [True, False])
def test_a_server_that_failed_to_initialize_is_neither_live_nor_ready(
    tmp_path: Path, strict: bool
) -> None:
    config = ActivatorConfig(repository=tmp_path, strict_readiness=strict)
    fleet: Any = _Fleet(config, repository=_Repository("model repository '/x' is not a directory"))
    assert (server_live(fleet), server_ready(fleet)) == (False, False)


def test_each_flag_has_a_line_in_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "thaw.cli", "up", "--help"],
        capture_output=True, text=True, check=True, cwd=_ROOT,
    ).stdout  # fmt: skip
    text = " ".join(out.split())
    for flag, words in {
        "--model-repository DIR, --model-store DIR": "a model repository (repeatable",
        "--strict-readiness BOOL": "answer ready only once the start is done",
        "--strict-model-config BOOL": "tritonserver's deprecated name",
        "--disable-auto-complete-config": "do not complete configs from model files",
        "--load-model NAME": "'*' wakes every model",
        "--exit-on-error BOOL": "neither live nor ready",
        "--model-namespacing BOOL": "each model repository is a namespace",
    }.items():
        helps = [after[:300] for after in text.split(flag)[1:]]  # the usage line's, its own
        assert any(words in h for h in helps), flag


def test_exit_on_error_is_a_triton_boolean_left_unset_by_default(tmp_path: Path) -> None:
    assert _config(str(tmp_path)).exit_on_error is None
    assert _config(str(tmp_path), "--exit-on-error=false").exit_on_error is False
    assert _config(str(tmp_path), "--exit-on-error", "true").exit_on_error is True


def test_a_missing_repository_may_be_passed_over_keeping_why(tmp_path: Path) -> None:
    make_add_sub(tmp_path / "a", "m")
    missing = tmp_path / "missing"
    repository = Repository.scan((missing, tmp_path / "a"), ScaleSettings(), missing_ok=True)
    assert repository.names() == ["m"]
    assert repository.start_error == f"model repository {str(missing)!r} is not a directory"
    assert Repository.scan(tmp_path / "a", ScaleSettings()).start_error is None
    # `--model-settings` applied over it keeps it (still neither live nor ready)
    applied, _ = apply_model_settings(repository, {"m": {"thaw.max_replicas": "2"}}, source=missing)
    assert applied.start_error == repository.start_error


def test_without_auto_complete_a_config_must_declare_its_tensors(tmp_path: Path) -> None:
    """`--disable-auto-complete-config` (`--strict-model-config=true`): the activator does not
    read an ONNX model's inputs and outputs into its config, as its replicas do not."""
    write_config(make_onnx_add(tmp_path), 'backend: "onnxruntime"\n')
    completed = Repository.scan(tmp_path, ScaleSettings())
    assert [t.name for t in completed.get("onnx_add").config.input] == ["INPUT0"]
    strict = Repository.scan(tmp_path, ScaleSettings(), auto_complete=False)
    assert "must contain at least one output" in strict.unavailable["onnx_add"]  # Triton's words
