"""`thaw up`'s config holds what its flags parse to: the restrictions, parsed once at start-up
(where a bad value is refused in tritonserver's words), and one redactor for every surface."""

from __future__ import annotations

import argparse
from pathlib import Path

import aiohttp
import pytest

from activator.config import ActivatorConfig
from activator.errors import ConfigError
from activator.fleet.fleet import Fleet
from activator.fleet.repository import Repository
from activator.observe.metrics import Metrics
from activator.process import cli
from activator.surfaces.app import REDACT, build_app, metrics_app
from activator.surfaces.grpc_surface import GrpcSurface
from tests.fakes.scaler_backend import FakeScalerBackend
from thawserver.restricted_protocols import Category, Restriction, parse_restrictions


def _config(tmp_path: Path, *flags: str) -> ActivatorConfig:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return cli.build_config(parser.parse_args(["up", str(tmp_path), *flags]))


def test_restrictions_are_parsed_into_the_config(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        "--http-restricted-api", "health,metadata:api-key=s3cret",
        "--grpc-restricted-protocol", "inference:role=admin",
    )  # fmt: skip
    assert config.http_restrictions == {
        Category.HEALTH: Restriction("api-key", "s3cret", "API"),
        Category.METADATA: Restriction("api-key", "s3cret", "API"),
    }
    assert config.grpc_restrictions == {
        Category.INFERENCE: Restriction("triton-grpc-protocol-role", "admin", "protocol"),
    }
    assert _config(tmp_path).http_restrictions == {} == _config(tmp_path).grpc_restrictions


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--http-restricted-api", "bogus:k=v", "unknown restricted api 'bogus'"),
        ("--grpc-restricted-protocol", "health", "--grpc-restricted-protocol option format"),
    ],
)
def test_a_bad_restriction_is_refused_at_start_up(
    tmp_path: Path, flag: str, value: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        _config(tmp_path, flag, value)


async def test_every_surface_uses_the_configs_parsed_values(tmp_path: Path) -> None:
    grpc = parse_restrictions(["health:k=v"])
    config = ActivatorConfig(repository=tmp_path, grpc_restrictions=grpc)
    assert config.redactor is config.redactor  # built once per config
    app = build_app(config, repository=Repository(tmp_path, {}))
    assert app[REDACT] is config.redactor
    async with aiohttp.ClientSession() as session:
        fleet = Fleet(config, Repository(tmp_path, {}), Metrics(), session,
                      backend=FakeScalerBackend(open_gate=True))  # fmt: skip
        assert metrics_app(fleet)[REDACT] is config.redactor
        assert GrpcSurface(fleet)._restrictions is config.grpc_restrictions
