"""`thaw up` flag handling and the `thaw status` table."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from activator import cli, status_cli
from activator.errors import ConfigError


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


def test_status_table_lists_every_model() -> None:
    table = status_cli.format_table(
        {
            "models": [
                {"model": "resnet50", "state": "warm", "replicas_ready": 2,
                 "replicas_desired": 3, "held_requests": 4, "in_flight": 7,
                 "last_cold_start_s": 0.2412, "last_error": None},
                {"model": "bert", "state": "cold", "replicas_ready": 0,
                 "replicas_desired": 0, "held_requests": 0, "in_flight": 0,
                 "last_cold_start_s": None, "last_error": "failed to load: boom"},
            ],
            "warm_pool": {"size": 1, "ready": 1},
        }
    )  # fmt: skip
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["MODEL", "STATE", "READY/DESIRED"]
    assert lines[1].split()[:6] == ["resnet50", "warm", "2/3", "4", "7", "0.241"]
    assert lines[2].split()[:6] == ["bert", "cold", "0/0", "0", "0", "-"]
    assert "failed to load: boom" in lines[2]
    assert lines[-1] == "warm pool: 1/1 ready"
