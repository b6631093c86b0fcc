"""`--lora-separator`, one flag for both servers: `thaw serve` takes it (its default from what
`thaw up` handed on in the environment) into its config; `thaw up` keeps it for its own model
list and routing and hands it to each local replica; with `--scaler kubernetes` it is kept too
(the chart gives the pods the same value: runtime.loraSeparator)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tests.fixtures.models import make_add_sub
from thawserver.lora_flags import LORA_SEPARATOR_ENV, add_lora_argument, replica_environment


@pytest.fixture(autouse=True)
def _own_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """`thaw up` run in this process sets its replicas' variable: put it back after."""
    monkeypatch.delenv(LORA_SEPARATOR_ENV, raising=False)


def test_thaw_serve_takes_the_flag_or_what_thaw_up_handed_on(tmp_path: Path) -> None:
    from runtime.process.cli import build_config
    from thaw.cli import build_parser

    make_add_sub(tmp_path, "add_sub")
    parser = build_parser("serve")
    assert build_config(parser.parse_args(["serve", str(tmp_path)])).lora_separator is None
    args = parser.parse_args(["serve", str(tmp_path), "--lora-separator", "_lora_"])
    assert build_config(args).lora_separator == "_lora_"
    handed = argparse.ArgumentParser()
    add_lora_argument(handed, {LORA_SEPARATOR_ENV: "::"})
    assert handed.parse_args([]).lora_separator == "::"


@pytest.mark.parametrize("scaler", [[], ["--scaler", "kubernetes", "--kubeconfig", "/k"]])
def test_thaw_up_keeps_it_and_hands_it_to_its_replicas(tmp_path: Path, scaler: list[str]) -> None:
    from activator.process import cli

    make_add_sub(tmp_path / "repo", "add_sub")
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["up", str(tmp_path / "repo"), *scaler, "--lora-separator", "_l_"])
    assert cli.build_config(args).lora_separator == "_l_"
    assert replica_environment(args) == {LORA_SEPARATOR_ENV: "_l_"}
    unset = parser.parse_args(["up", str(tmp_path / "repo"), *scaler])
    assert cli.build_config(unset).lora_separator is None
    assert replica_environment(unset) == {}
