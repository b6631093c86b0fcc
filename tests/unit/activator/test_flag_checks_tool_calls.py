"""`thaw up --scaler kubernetes` with `--tool-call-parser` or `--max-tool-call-parse-bytes`:
refused before anything connects, naming the Helm chart value that gives the runtime pods the
flag (the pods' command line is the chart's pool template, which thaw up does not write); with
`--scaler local` both reach the replicas (through their environment)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from activator.process import cli
from tests.fixtures.models import make_add_sub
from thawserver.tool_call_flags import PARSE_BYTES_ENV, PARSER_ENV, replica_environment
from thawwire.openai_api import DEFAULT_MAX_TOOL_CALL_PARSE_BYTES


@pytest.fixture(autouse=True)
def _own_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """`thaw up` run in this process sets its replicas' variables: put them back after."""
    for name in (PARSER_ENV, PARSE_BYTES_ENV):
        monkeypatch.delenv(name, raising=False)


def _up(repo: Path, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return parser.parse_args(["up", str(repo), *argv])


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (
            ["--tool-call-parser", "mistral"],
            "thaw up: error: --tool-call-parser mistral reaches replicas with --scaler local "
            "only: on Kubernetes the runtime pods' flags are the Helm chart's; set its value "
            "runtime.toolCallParser=mistral instead",
        ),
        (
            ["--max-tool-call-parse-bytes", "4096"],
            "thaw up: error: --max-tool-call-parse-bytes 4096 reaches replicas with --scaler "
            "local only: on Kubernetes the runtime pods' flags are the Helm chart's; set its "
            "value runtime.maxToolCallParseBytes=4096 instead",
        ),
    ],
)
def test_on_kubernetes_the_flags_are_refused_naming_the_chart_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], words: str
) -> None:
    make_add_sub(tmp_path / "repo", "add_sub")
    args = _up(tmp_path / "repo", "--scaler", "kubernetes", "--kubeconfig", "/k", *flags)
    assert args.func(args) == 2  # before anything connects to the API
    assert words in capsys.readouterr().err
    assert PARSER_ENV not in os.environ and PARSE_BYTES_ENV not in os.environ  # refused: unset


def test_on_kubernetes_the_default_limit_given_is_no_change_and_passes(tmp_path: Path) -> None:
    make_add_sub(tmp_path / "repo", "add_sub")
    default = str(DEFAULT_MAX_TOOL_CALL_PARSE_BYTES)
    args = _up(tmp_path / "repo", "--scaler", "kubernetes", "--kubeconfig", "/k",
               "--max-tool-call-parse-bytes", default)  # fmt: skip
    assert cli.build_config(args).scaler is not None


def test_with_the_local_scaler_both_reach_the_replicas(tmp_path: Path) -> None:
    make_add_sub(tmp_path / "repo", "add_sub")
    args = _up(tmp_path / "repo", "--tool-call-parser", "llama3",
               "--max-tool-call-parse-bytes", "4096")  # fmt: skip
    cli.build_config(args)  # not refused
    assert replica_environment(args) == {PARSER_ENV: "llama3", PARSE_BYTES_ENV: "4096"}
