"""`thaw up` flag handling and the `thaw status` table."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from activator import cli, status_cli
from activator.errors import ConfigError
from activator.scaler.backend import PoolStatus
from activator.scaler.local_config import LocalConfig
from activator.status_document import ModelState, ModelStatus, StatusDocument


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    cli.register(sub)
    status_cli.register(sub)
    return parser.parse_args(list(argv))


def test_scale_flags_become_the_default_settings(tmp_path: Path) -> None:
    args = _parse("up", str(tmp_path), "--max-replicas", "3", "--scale-to-zero-grace-s", "5")
    config = cli.build_config(args)
    assert config.defaults.max_replicas == 3
    assert config.defaults.scale_to_zero_grace_s == 5.0
    assert config.defaults.min_replicas == 0
    assert config.host == "127.0.0.1" and config.port == 8000


def test_the_scaler_is_chosen_at_the_cli_with_its_own_settings(tmp_path: Path) -> None:
    args = _parse(
        "up", str(tmp_path), "--scaler", "local", "--warm-pool", "3",
        "--preload-frameworks", "onnxruntime", "--direct-max-age-s", "4",
    )  # fmt: skip
    config = cli.build_config(args)
    assert isinstance(config.scaler, LocalConfig)
    assert config.scaler.warm_pool == 3
    assert config.scaler.preload_frameworks == ("onnxruntime",)
    assert config.scaler.direct_max_age_s == 4.0
    assert config.scaler.front_door_url is None  # set once the listener is bound
    assert cli.build_config(_parse("up", str(tmp_path))).scaler == LocalConfig(
        warm_pool=1, serve_command=config.scaler.serve_command
    )  # --scaler local is the default


def test_an_unknown_scaler_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        _parse("up", str(tmp_path), "--scaler", "nomad")
    assert info.value.code == 2
    assert "invalid choice: 'nomad'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--stable-window-s", "3"), "`--stable-window-s` = 3, must be in [6, 3600]"),
        (("--port", "70000"), "`--port` = 70000, must be in [0, 65535]"),
        (("--warm-pool", "-1"), "`--warm-pool` = -1, must be in [0, 64]"),
        (("--max-held-requests", "lots"), "`--max-held-requests` = 'lots', must be an integer"),
    ],
)
def test_bad_flags_are_refused_in_one_form(
    tmp_path: Path, argv: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        cli.build_config(_parse("up", str(tmp_path), *argv))
    assert message in info.value.message


def test_missing_repository_exits_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _parse("up", str(tmp_path / "nope"), "--cache", str(tmp_path / "c"))
    assert cli.run(args) == 2
    assert "is not a directory" in capsys.readouterr().err


def _model(name: str, state: ModelState, **fields: Any) -> ModelStatus:
    zero = {"replicas_ready": 0, "replicas_desired": 0, "replicas_starting": 0}
    zero.update(held_requests=0, in_flight=0, direct_connections=0)
    return ModelStatus(name, state, **{**zero, **fields})


def test_status_table_lists_every_model() -> None:
    resnet = _model(
        "resnet50", ModelState.WARM, replicas_ready=2, replicas_desired=3, held_requests=4,
        in_flight=7, last_cold_start_s=0.2412, last_error=None,
    )  # fmt: skip
    bert = _model(
        "bert", ModelState.COLD, last_cold_start_s=None, last_error="failed to load: boom"
    )
    doc = StatusDocument(models=(resnet, bert), warm_pool=PoolStatus(size=1, ready=1))
    table = status_cli.format_table(doc)
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["MODEL", "STATE", "READY/DESIRED"]
    assert lines[1].split()[:6] == ["resnet50", "warm", "2/3", "4", "7", "0.241"]
    assert lines[2].split()[:6] == ["bert", "cold", "0/0", "0", "0", "-"]
    assert "failed to load: boom" in lines[2]
    assert lines[-1] == "warm pool: 1/1 ready"
