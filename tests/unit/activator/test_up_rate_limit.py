"""`thaw up --rate-limit` / `--rate-limit-resource` (tritonserver's rate limiter) reach every
replica as `thaw serve` takes them; a bad value stops `thaw up` at start in Triton's words; with
`--scaler kubernetes` (the pods' flags are the chart's) they are refused."""

from __future__ import annotations

import argparse
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


def test_the_rate_limiter_reaches_every_replica_as_thaw_serve_takes_it(tmp_path: Path) -> None:
    args = _up(
        str(tmp_path), "--rate-limit=execution_count",
        "--rate-limit-resource=R1:10", "--rate-limit-resource", "R2:4:0",
    )  # fmt: skip
    local = up_cli._scaler_config(args)
    assert isinstance(local, LocalConfig)
    config = ActivatorConfig(repository=tmp_path)
    for argv in (serve_args(config, local), replica_argv(config, local)):
        assert argv[-3:] == [
            "--rate-limit=execution_count",
            "--rate-limit-resource=R1:10",
            "--rate-limit-resource=R2:4:0",
        ]
    parser = argparse.ArgumentParser()
    serve_cli.register(parser.add_subparsers())
    served = serve_cli.build_config(parser.parse_args(["serve", *serve_args(config, local)]))
    assert served.rate_limit == "execution_count"
    assert served.rate_limit_resources == (("R1", 10, None), ("R2", 4, 0))


def test_off_without_resources_gives_the_replicas_no_flag(tmp_path: Path) -> None:
    for extra in ((), ("--rate-limit=off",)):
        local = up_cli._scaler_config(_up(str(tmp_path), *extra))
        assert isinstance(local, LocalConfig)
        argv = serve_args(ActivatorConfig(repository=tmp_path), local)
        assert not any(arg.startswith("--rate-limit") for arg in argv)


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--rate-limit=fast",), "Invalid rate limit mode: fast"),
        (
            ("--rate-limit-resource=R1",),
            "--rate-limit-resource option format is '<resource_name>:<count>:<device>' or "
            "'<resource_name>:<count>'. Got R1",
        ),
        (("--rate-limit-resource=R1:-2",), "Got R1:-2"),
    ],
)
def test_a_bad_value_is_refused_at_start_in_tritons_words(
    tmp_path: Path, flags: tuple[str, ...], says: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        up_cli._scaler_config(_up(str(tmp_path), *flags))
    assert says in str(caught.value)


def test_with_the_kubernetes_scaler_the_flags_are_refused(tmp_path: Path) -> None:
    args = _up(str(tmp_path), "--scaler", "kubernetes", "--rate-limit=execution_count")
    with pytest.raises(
        ConfigError, match="--rate-limit / --rate-limit-resource need --scaler local"
    ):
        up_cli._scaler_config(args)
