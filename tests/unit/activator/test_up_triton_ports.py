"""`thaw up`'s Triton ports: gRPC on 8001 and metrics on 8002 by default, free ones with
`--port 0`, off with `--allow-*=false`."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from activator.errors import ConfigError
from activator.process import cli


def _config(tmp_path: Path, *argv: str) -> tuple[int | None, int | None]:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    config = cli.build_config(parser.parse_args(["up", str(tmp_path), *argv]))
    return config.grpc_port, config.metrics_port


def test_triton_ports_by_default_free_ones_with_port_zero_and_off_when_not_allowed(
    tmp_path: Path,
) -> None:
    assert _config(tmp_path) == (8001, 8002)
    assert _config(tmp_path, "--port", "0") == (0, 0)
    assert _config(tmp_path, "--port", "0", "--grpc-port", "9001") == (9001, 0)
    assert _config(tmp_path, "--allow-grpc=false", "--allow-metrics", "off") == (None, None)


def test_a_bad_triton_port_is_refused_in_one_form(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _config(tmp_path, "--grpc-port", "70000")
    assert "`--grpc-port` = 70000, must be in [0, 65535]" in info.value.message
    with pytest.raises(SystemExit):
        _config(tmp_path, "--allow-grpc=maybe")
