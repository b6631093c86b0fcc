"""Placement classes as configured (issue 22, item 5): `--pool-class NAME=DEPLOYMENT` flags,
`thaw.placement_class` in config.pbtxt or the model-settings file, and a model naming a class
no flag gives refused at start-up with a clear error."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from activator.config import ScaleSettings, validated
from activator.errors import ConfigError
from activator.fleet.model_settings import apply_model_settings, read_model_settings
from activator.fleet.repository import Repository
from activator.process import cli
from activator.process.kube_cli import kubernetes_config, placement
from activator.scaler.kube_config import PoolClass
from tests.fixtures.models import make_add_sub
from tests.fixtures.up_process import with_params


def _up(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return parser.parse_args(["up", "/repo", "--scaler", "kubernetes", *argv])


def test_pool_classes_beside_the_default_pool() -> None:
    kube = kubernetes_config(
        _up("--pool-class", "gpu=thaw-gpu", "--pool-class", "cpu-small=thaw-cpu"), {}
    )
    assert kube.classes() == {
        "default": PoolClass("default", "thaw-pool", (("thaw.dev/pool", "thaw-pool"),)),
        "gpu": PoolClass("gpu", "thaw-gpu", (("thaw.dev/pool", "thaw-gpu"),)),
        "cpu-small": PoolClass("cpu-small", "thaw-cpu", (("thaw.dev/pool", "thaw-cpu"),)),
    }
    assert kube.class_of("anything") == "default"


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--pool-class", "gpu"], "must be NAME=DEPLOYMENT"),
        (["--pool-class", "GPU=thaw-gpu"], "must be NAME=DEPLOYMENT"),
        (["--pool-class", "gpu=Thaw_GPU"], "is not a Deployment name"),
        (["--pool-class", "default=thaw-gpu"], "is the pool of --pool-deployment"),
        (["--pool-class", "gpu=a", "--pool-class", "gpu=b"], "class 'gpu' is given twice"),
        (["--pool-class", "gpu=thaw-pool"], "is another class's pool already"),
        (["--pool-class", "a=x", "--pool-class", "b=x"], "is another class's pool already"),
    ],
)
def test_bad_pool_classes_are_refused_naming_the_flag(flags: list[str], words: str) -> None:
    with pytest.raises(ConfigError, match="`--pool-class`") as info:
        kubernetes_config(_up(*flags), {})
    assert words in info.value.message


def test_a_models_placement_class_comes_from_its_parameters_or_the_settings_file(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    with_params(make_add_sub(repo, "llm"), placement_class="gpu")
    make_add_sub(repo, "tiny")
    repository = Repository.scan(repo, ScaleSettings())
    assert repository.get("llm").settings.placement_class == "gpu"
    assert repository.get("tiny").settings.placement_class == "default"
    settings = tmp_path / "models.json"
    settings.write_text(json.dumps({"models": {"tiny": {"thaw.placement_class": "cpu"}}}))
    repository, _ = apply_model_settings(repository, read_model_settings(settings), source=settings)
    assert repository.get("tiny").settings.placement_class == "cpu"
    with pytest.raises(ConfigError, match=r"`thaw.placement_class` = 'GPU!' \(model m\)"):
        validated(ScaleSettings(), {"thaw.placement_class": "GPU!"}, model="m")


def test_a_model_of_an_unknown_class_is_refused_and_the_others_get_theirs() -> None:
    kube = kubernetes_config(_up("--pool-class", "gpu=thaw-gpu"), {})
    placed, refused = placement(kube, {"llm": "gpu", "tiny": "default", "odd": "tpu"})
    assert placed.model_classes == (("llm", "gpu"),)
    assert placed.class_of("llm") == "gpu" and placed.class_of("tiny") == "default"
    assert refused == {
        "odd": "`thaw.placement_class` = 'tpu' (model odd): no such placement class; the "
        "classes are default, gpu (thaw up --pool-class NAME=DEPLOYMENT)"
    }


def test_thaw_up_refuses_to_start_with_a_model_of_an_unknown_class(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "repo"
    with_params(make_add_sub(repo, "odd"), placement_class="tpu")
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["up", str(repo), "--scaler", "kubernetes", "--kubeconfig", "/k"])
    assert args.func(args) == 2  # before anything connects to the API
    assert "thaw up: error: `thaw.placement_class` = 'tpu' (model odd)" in capsys.readouterr().err


def test_a_shared_model_keeps_its_own_class_and_an_unknown_class_is_refused() -> None:
    # Shared pods come from each class's own pool (shared_pods places a model only on pods
    # of its class), so a shared GPU-class model is placed, not refused.
    kube = kubernetes_config(_up("--pool-class", "gpu=thaw-gpu"), {})
    classes = {"llm": "gpu", "tiny": "default", "odd": "tpu"}
    placed, refused = placement(kube, classes)
    assert placed.model_classes == (("llm", "gpu"),)
    assert placed.class_of("tiny") == "default"
    assert list(refused) == ["odd"]
    assert refused["odd"].startswith("`thaw.placement_class` = 'tpu' (model odd): no such")
