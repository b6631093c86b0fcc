"""`thaw up --target auto|cpu|cuda` reaches every pool process and the fork server unchanged."""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import pytest

from activator.config import ActivatorConfig
from activator.process import cli as up_cli
from activator.scaler.local.backend import fork_server_argv, replica_argv, serve_args
from activator.scaler.local_config import LocalConfig
from runtime.process import cli as serve_cli


def _up(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    up_cli.register(parser.add_subparsers())
    return parser.parse_args(["up", *argv])


def _flag(argv: list[str], name: str) -> str:
    return dict(itertools.pairwise(argv))[name]


@pytest.mark.parametrize(("flags", "target"), [((), "auto"), (("--target", "cuda"), "cuda"),
                                               (("--target", "cpu"), "cpu")])  # fmt: skip
def test_thaw_up_target_flag_becomes_the_local_config(
    tmp_path: Path, flags: tuple[str, ...], target: str
) -> None:
    local = up_cli._scaler_config(_up(str(tmp_path), *flags))
    assert isinstance(local, LocalConfig) and local.target == target


def test_a_target_thaw_up_does_not_know_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        _up(str(tmp_path), "--target", "tpu")


@pytest.mark.parametrize("target", ["auto", "cpu", "cuda"])
def test_pool_processes_and_the_fork_server_get_the_target(tmp_path: Path, target: str) -> None:
    config = ActivatorConfig(repository=tmp_path)
    local = LocalConfig(target=target)
    forked = serve_args(config, local)  # what a fork request carries
    assert _flag(forked, "--target") == target
    assert _flag(replica_argv(config, local), "--target") == target  # a spawned process
    assert _flag(fork_server_argv(config, local), "--target") == target
    # ... and `thaw serve` takes it as given (an `auto` is resolved in each child, by a scan
    # that creates no CUDA context; the fork server never resolves it).
    parser = argparse.ArgumentParser()
    serve_cli.register(parser.add_subparsers())
    served = serve_cli.build_config(parser.parse_args(["serve", *forked]))
    assert served.target == target
