"""`thaw up --model-control-mode poll --repository-poll-secs N` (tritonserver's flags, as
`thaw serve` takes them): the poll interval, its range, and its refusal on Kubernetes."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from activator.config import ActivatorConfig
from activator.errors import ConfigError
from activator.process import cli as up_cli


def _config(*argv: str) -> ActivatorConfig:
    parser = argparse.ArgumentParser()
    up_cli.register(parser.add_subparsers())
    return up_cli.build_config(parser.parse_args(["up", *argv]))


def test_poll_mode_reads_the_repository_every_poll_secs(tmp_path: Path) -> None:
    config = _config(str(tmp_path), "--model-control-mode=POLL", "--repository-poll-secs=2.5")
    assert config.repository_poll_s == 2.5
    assert not config.model_control  # load/unload refused in poll mode, as tritonserver
    assert _config(str(tmp_path), "--model-control-mode=poll").repository_poll_s == 15.0


def test_other_modes_do_not_poll(tmp_path: Path) -> None:
    for mode in ("none", "explicit"):
        config = _config(str(tmp_path), f"--model-control-mode={mode}")
        assert config.repository_poll_s is None


def test_the_poll_interval_has_thaw_serves_range(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--repository-poll-secs.* must be in \[0.1, 86400"):
        _config(str(tmp_path), "--model-control-mode=poll", "--repository-poll-secs=0")


def test_poll_mode_is_refused_with_the_kubernetes_scaler(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="poll is not supported with --scaler kubernetes"):
        _config(str(tmp_path), "--model-control-mode=poll", "--scaler", "kubernetes")
