"""`thaw up --http-header-forward-pattern` / `--grpc-header-forward-pattern` reach every replica
(a forked pool process, a spawned one) as `thaw serve` takes them; a pattern that does not
compile is refused at start, naming the flag."""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import pytest

from activator.config import ActivatorConfig
from activator.errors import ConfigError
from activator.process import cli as up_cli
from activator.scaler.local.backend import replica_argv, serve_args
from activator.scaler.local_config import LocalConfig
from runtime.process import cli as serve_cli


def _up(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    up_cli.register(parser.add_subparsers())
    return parser.parse_args(["up", *argv])


def test_the_patterns_reach_every_replica_as_thaw_serve_takes_them(tmp_path: Path) -> None:
    args = _up(
        str(tmp_path),
        "--http-header-forward-pattern", "my_header.*",
        "--grpc-header-forward-pattern", "(?-i)MY_HEADER.*",
    )  # fmt: skip
    local = up_cli._scaler_config(args)
    assert isinstance(local, LocalConfig)
    config = ActivatorConfig(repository=tmp_path)
    for argv in (serve_args(config, local), replica_argv(config, local)):
        flags = dict(itertools.pairwise(argv))
        assert flags["--http-header-forward-pattern"] == "my_header.*"
        assert flags["--grpc-header-forward-pattern"] == "(?-i)MY_HEADER.*"
    parser = argparse.ArgumentParser()
    serve_cli.register(parser.add_subparsers())
    served = serve_cli.build_config(parser.parse_args(["serve", *serve_args(config, local)]))
    assert served.http_header_forward_pattern == "my_header.*"
    assert served.grpc_header_forward_pattern == "(?-i)MY_HEADER.*"


def test_without_patterns_no_replica_gets_the_flags(tmp_path: Path) -> None:
    local = up_cli._scaler_config(_up(str(tmp_path)))
    assert isinstance(local, LocalConfig)
    argv = serve_args(ActivatorConfig(repository=tmp_path), local)
    assert not any("header-forward" in arg for arg in argv)


@pytest.mark.parametrize("surface", ["http", "grpc"])
def test_a_pattern_that_does_not_compile_is_refused_naming_the_flag(
    tmp_path: Path, surface: str
) -> None:
    flag = f"--{surface}-header-forward-pattern"
    with pytest.raises(ConfigError, match=flag):
        up_cli._scaler_config(_up(str(tmp_path), flag, "my_header(["))
