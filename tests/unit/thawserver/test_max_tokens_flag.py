"""`--default-max-tokens`, one flag for both servers (Triton's OpenAI frontend's): `thaw serve`
takes it (its default from what `thaw up` handed on in the environment) into its config, out
of range refused; `thaw up` hands it to each local replica, and with `--scaler kubernetes`
refuses a value other than the default (the pods' command line is the chart's)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from runtime.config import ConfigError
from tests.fixtures.models import make_add_sub
from thawserver.max_tokens_flag import (
    DEFAULT_MAX_TOKENS_ENV,
    add_default_max_tokens_argument,
    replica_environment,
)
from thawwire.openai_api import DEFAULT_MAX_TOKENS


@pytest.fixture(autouse=True)
def _own_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """`thaw up` run in this process sets its replicas' variable: put it back after."""
    monkeypatch.delenv(DEFAULT_MAX_TOKENS_ENV, raising=False)


def _up(repo: Path, *argv: str) -> argparse.Namespace:
    from activator.process import cli

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return parser.parse_args(["up", str(repo), *argv])


def test_thaw_serve_takes_the_flag_or_what_thaw_up_handed_on(tmp_path: Path) -> None:
    from runtime.process.cli import build_config
    from thaw.cli import build_parser

    make_add_sub(tmp_path, "add_sub")
    parser = build_parser("serve")
    unset = build_config(parser.parse_args(["serve", str(tmp_path)]))
    assert unset.default_max_tokens == DEFAULT_MAX_TOKENS == 16
    args = parser.parse_args(["serve", str(tmp_path), "--default-max-tokens", "512"])
    assert build_config(args).default_max_tokens == 512
    with pytest.raises(ConfigError, match="default_max_tokens"):
        build_config(parser.parse_args(["serve", str(tmp_path), "--default-max-tokens", "0"]))
    handed = argparse.ArgumentParser()
    add_default_max_tokens_argument(handed, {DEFAULT_MAX_TOKENS_ENV: "64"})
    assert handed.parse_args([]).default_max_tokens == 64


def test_thaw_up_hands_it_to_its_local_replicas(tmp_path: Path) -> None:
    from activator.process import cli

    make_add_sub(tmp_path / "repo", "add_sub")
    args = _up(tmp_path / "repo", "--default-max-tokens", "256")
    cli.build_config(args)  # not refused
    assert replica_environment(args) == {DEFAULT_MAX_TOKENS_ENV: "256"}


def test_on_kubernetes_only_the_default_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from activator.process import cli

    make_add_sub(tmp_path / "repo", "add_sub")
    k8s = ("--scaler", "kubernetes", "--kubeconfig", "/k")
    assert cli.build_config(_up(tmp_path / "repo", *k8s, "--default-max-tokens", "16")).scaler
    args = _up(tmp_path / "repo", *k8s, "--default-max-tokens", "256")
    assert args.func(args) == 2  # before anything connects to the API
    err = capsys.readouterr().err
    assert "--default-max-tokens 256 reaches replicas with --scaler local only" in err
    assert "runtime.defaultMaxTokens=256" in err  # the chart's value that does it there
