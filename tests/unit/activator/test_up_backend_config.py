"""`thaw up --backend-config` (tritonserver's backend settings) reaches every replica as
`thaw serve` takes it; a malformed one stops `thaw up` at start in Triton's words; with
`--scaler kubernetes` (the pods' flags are the chart's) it is refused."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from activator.config import ActivatorConfig
from activator.errors import ConfigError
from activator.process import cli as up_cli
from activator.process.repository_cli import repository_settings
from activator.scaler.local.backend import replica_argv, serve_args
from activator.scaler.local_config import LocalConfig
from runtime.process import cli as serve_cli


def _up(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    up_cli.register(parser.add_subparsers())
    return parser.parse_args(["up", *argv])


def test_backend_settings_reach_every_replica_as_thaw_serve_takes_them(tmp_path: Path) -> None:
    args = _up(
        str(tmp_path), "--backend-config=python,shm-default-byte-size=5242880",
        "--backend-config", "python,stub-timeout-seconds=45",
    )  # fmt: skip
    local = up_cli._scaler_config(args)
    assert isinstance(local, LocalConfig)
    config = ActivatorConfig(repository=tmp_path)
    for argv in (serve_args(config, local), replica_argv(config, local)):
        assert argv[-2:] == [
            "--backend-config=python,shm-default-byte-size=5242880",
            "--backend-config=python,stub-timeout-seconds=45",
        ]
    parser = argparse.ArgumentParser()
    serve_cli.register(parser.add_subparsers())
    served = serve_cli.build_config(parser.parse_args(["serve", *serve_args(config, local)]))
    assert served.backend_config == (
        ("python", "shm-default-byte-size", "5242880"),
        ("python", "stub-timeout-seconds", "45"),
    )


def test_without_the_flag_the_replicas_get_none(tmp_path: Path) -> None:
    local = up_cli._scaler_config(_up(str(tmp_path)))
    assert isinstance(local, LocalConfig)
    argv = serve_args(ActivatorConfig(repository=tmp_path), local)
    assert not any(arg.startswith("--backend-config") for arg in argv)


@pytest.mark.parametrize(
    "value", ["python", "python,", "python,=5", "python,key", "python,key=", ",key=5"]
)
def test_a_malformed_setting_is_refused_at_start(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError, match="--backend-config option format is"):
        up_cli._scaler_config(_up(str(tmp_path), f"--backend-config={value}"))


def test_with_the_kubernetes_scaler_the_flag_is_refused(tmp_path: Path) -> None:
    args = _up(str(tmp_path), "--scaler", "kubernetes", "--backend-config=python,a=b")
    with pytest.raises(ConfigError, match="--backend-config reaches replicas with --scaler local"):
        up_cli._scaler_config(args)


def test_default_max_batch_size_completes_the_activators_own_answers(tmp_path: Path) -> None:
    settings = repository_settings(
        _up(str(tmp_path), "--backend-config=onnxruntime,default-max-batch-size=9"),
        kubernetes=False,
    )
    assert settings["default_max_batch_size"] == 9
    assert repository_settings(_up(str(tmp_path)), kubernetes=False)["default_max_batch_size"] == 4
    for hostile in ("nine", "99999999999"):
        with pytest.raises(ConfigError, match="not an integer up to 2147483647"):
            repository_settings(
                _up(str(tmp_path), f"--backend-config=default-max-batch-size={hostile}"),
                kubernetes=False,
            )
