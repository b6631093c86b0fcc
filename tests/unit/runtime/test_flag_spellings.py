"""One spelling per flag on `thaw serve` and `thaw up` (`--head-timeout-s`), tritonserver's
names kept on `thaw serve`, and the `-secs` spellings `thaw serve` had still accepted."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from activator.process import cli as up_cli
from runtime.config import ServeConfig
from runtime.process import cli as serve_cli
from runtime.process.triton_flags import SECS_ALIASES, TRITON_FLAGS

_Register = Callable[[argparse._SubParsersAction], None]
# A duration's unit ending: two spellings of one flag differ only there.
_UNIT = re.compile(r"-(s|secs|seconds)$")


def _parser(register: _Register) -> argparse.ArgumentParser:
    root = argparse.ArgumentParser()
    sub = root.add_subparsers()
    register(sub)
    (parser,) = sub.choices.values()
    return parser


def _shown(register: _Register) -> set[str]:
    """The long options `--help` shows."""
    return {
        option
        for action in _parser(register)._actions
        if action.help != argparse.SUPPRESS
        for option in action.option_strings
        if option.startswith("--")
    }


def _help(register: _Register) -> str:
    return _parser(register).format_help()


def test_a_flag_both_clis_have_is_spelled_the_same_on_both() -> None:
    serve = {_UNIT.sub("", option): option for option in _shown(serve_cli.register)}
    up = {_UNIT.sub("", option): option for option in _shown(up_cli.register)}
    shared = serve.keys() & up.keys()
    assert {"--head-timeout", "--idle-timeout", "--body-timeout", "--max-connections"} <= shared
    assert {name: serve[name] for name in shared} == {name: up[name] for name in shared}


def test_help_shows_the_s_spellings_and_no_alias() -> None:
    for register in (serve_cli.register, up_cli.register):
        text = _help(register)
        for flag in ("--head-timeout-s", "--idle-timeout-s", "--body-timeout-s"):
            assert re.search(rf"{flag}\b(?!-)", text), flag
        assert "timeout-secs S" not in text and "--head-timeout-secs" not in text
    assert "else 408 Request Timeout" in _help(serve_cli.register)  # the one status


def test_thaw_serve_shows_secs_only_for_tritonservers_own_flags() -> None:
    secs = {option for option in _shown(serve_cli.register) if option.endswith("-secs")}
    assert secs == {"--exit-timeout-secs", "--repository-poll-secs"}
    assert {option.removeprefix("--") for option in secs} <= TRITON_FLAGS


def _serve(*argv: str) -> ServeConfig:
    parser = argparse.ArgumentParser()
    serve_cli.register(parser.add_subparsers())
    return serve_cli.build_config(parser.parse_args(["serve", "repo", *argv]))


@pytest.mark.parametrize("spelling", ["s", "secs"])
def test_thaw_serve_takes_both_spellings_for_the_same_setting(spelling: str) -> None:
    config = _serve(
        f"--head-timeout-{spelling}", "3", f"--idle-timeout-{spelling}", "4",
        f"--body-timeout-{spelling}", "5",
    )  # fmt: skip
    assert config.connections.head_timeout_s == 3.0
    assert config.connections.idle_timeout_s == 4.0
    assert config.body_timeout_s == 5.0


def test_the_defaults_hold_without_either_spelling() -> None:
    config = _serve()
    assert (config.connections.head_timeout_s, config.connections.idle_timeout_s) == (10.0, 75.0)
    assert config.body_timeout_s == 60.0


def test_every_alias_names_a_primary_flag() -> None:
    shown = _shown(serve_cli.register)
    assert set(SECS_ALIASES.values()) <= shown
    assert not set(SECS_ALIASES) & shown


def test_thaw_up_takes_the_s_spellings(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    up_cli.register(parser.add_subparsers())
    args = parser.parse_args(
        ["up", str(tmp_path), "--head-timeout-s", "3", "--idle-timeout-s", "4",
         "--body-timeout-s", "5"]
    )  # fmt: skip
    config = up_cli.build_config(args)
    assert (config.connections.head_timeout_s, config.connections.idle_timeout_s) == (3.0, 4.0)
    assert config.body_timeout_s == 5.0
