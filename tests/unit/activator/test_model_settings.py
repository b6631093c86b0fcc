"""`thaw up --model-settings FILE`: per-model `thaw.*` overrides (the chart's models ConfigMap)
applied over config.pbtxt, validated in the same words, bad files refused naming the file; and
the `--scaler kubernetes` flags."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from activator.config import ScaleSettings
from activator.errors import ConfigError
from activator.fleet.model_settings import apply_model_settings, read_model_settings
from activator.fleet.repository import Repository
from activator.process import cli
from activator.scaler.kube_config import KubernetesConfig
from tests.fixtures.models import make_add_sub
from tests.fixtures.up_process import with_params


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    root = tmp_path / "repo"
    with_params(make_add_sub(root), max_replicas=2, target_concurrency=5)
    make_add_sub(root, "other")
    return Repository.scan(root, ScaleSettings())


def _file(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "models.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_overrides_win_over_config_pbtxt_and_leave_other_models_alone(
    repo: Repository, tmp_path: Path
) -> None:
    path = _file(tmp_path, {"models": {"add_sub": {"thaw.max_replicas": "7", "thaw.hot": True},
                                        "ghost": {"thaw.min_replicas": 1}}})  # fmt: skip
    updated, unknown = apply_model_settings(repo, read_model_settings(path), source=path)
    settings = updated.get("add_sub").settings
    assert (settings.max_replicas, settings.target_concurrency, settings.hot) == (7, 5.0, True)
    assert updated.get("other").settings == repo.get("other").settings
    assert unknown == ["ghost"]


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ("{", "cannot read model settings"),
        ({"models": []}, '{"models"'),
        ({"models": {"../x": {}}}, "is not a model name"),
        (
            {"models": {"add_sub": {"max_replicas": "3"}}},
            "'max_replicas' is not a `thaw.*` setting",
        ),
        ({"models": {"add_sub": {"thaw.max_replicas": [1]}}}, "must map `thaw.*` to values"),
    ],
)
def test_a_bad_file_is_refused_naming_it(tmp_path: Path, data: object, words: str) -> None:
    path = _file(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        read_model_settings(path)
    assert str(path) in info.value.message and words in info.value.message


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"thaw.max_replicas": "0"},
            "`thaw.max_replicas` = 0 (model add_sub), must be in [1, 100]",
        ),
        ({"thaw.hot": "maybe"}, "`thaw.hot` = 'maybe' (model add_sub), must be true or false"),
        ({"thaw.nope": "1"}, "unknown setting `thaw.nope` (model add_sub)"),
    ],
)
def test_a_bad_value_is_refused_in_the_config_pbtxt_words(
    repo: Repository, tmp_path: Path, params: dict[str, object], message: str
) -> None:
    path = _file(tmp_path, {"models": {"add_sub": params}})
    with pytest.raises(ConfigError) as info:
        apply_model_settings(repo, read_model_settings(path), source=path)
    assert info.value.message == f"{path}: {message}"


def _up(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    cli.register(sub)
    return parser.parse_args(["up", "/repo", *argv])


def test_kubernetes_flags_and_the_pods_environment_build_its_config() -> None:
    args = _up("--scaler", "kubernetes", "--pool-selector", "thaw.dev/pool=warm",
               "--lease-duration-s", "9")  # fmt: skip
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "POD_NAME": "act-7", "POD_IP": "10.1.2.3",
           "POD_NAMESPACE": "thaw"}  # fmt: skip
    config = cli.build_config(args)
    assert isinstance(config.scaler, KubernetesConfig)
    assert config.build_images is False and config.cache_dir is None
    from activator.process.kube_cli import kubernetes_config

    kube = kubernetes_config(args, env)
    assert (kube.in_cluster, kube.activator_id, kube.advertise_host, kube.namespace) == (
        True, "act-7", "10.1.2.3", "thaw"
    )  # fmt: skip
    assert kube.pool_selector == (("thaw.dev/pool", "warm"),) and kube.lease_duration_s == 9
    assert (kube.runtime_port, kube.runtime_grpc_port) == (None, None)  # the pods' named ports
    ports = kubernetes_config(
        _up("--scaler", "kubernetes", "--runtime-port", "9000", "--runtime-grpc-port", "9001"), env
    )
    assert (ports.runtime_port, ports.runtime_grpc_port) == (9000, 9001)
    outside = kubernetes_config(_up("--scaler", "kubernetes", "--kubeconfig", "/k"), env)
    assert outside.in_cluster is False  # an explicit kubeconfig wins over auto


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--pool-selector", "a!=b"], "`--pool-selector` = 'a!=b'"),
        (["--pool-selector", "k=bad value"], "`--pool-selector`"),
        (["--fleet=x_"], "`--fleet` = 'x_', must be a label value"),
        (["--lease-duration-s", "0"], "`--lease-duration-s` = 0, must be in [1, 3600]"),
        (["--peer-port", "70000"], "`--peer-port` = 70000"),
        (["--runtime-grpc-port", "0"], "`--runtime-grpc-port` = 0, must be in [1, 65535]"),
    ],
)
def test_bad_kubernetes_flags_are_refused_naming_the_flag(argv: list[str], words: str) -> None:
    with pytest.raises(ConfigError) as info:
        cli.build_config(_up("--scaler", "kubernetes", *argv))
    assert words in info.value.message
