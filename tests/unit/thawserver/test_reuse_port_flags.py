"""tritonserver's `--reuse-http-port` / `--reuse-grpc-port` on `thaw serve` and `thaw up`:
Triton's booleans (default false) kept in each config, refused by name where the system has no
SO_REUSEPORT; and `--cache-directory`, accepted without effect on both."""

from __future__ import annotations

import argparse
import logging
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from activator.config import ActivatorConfig
from activator.errors import ConfigError as UpConfigError
from activator.process import cli as up_cli
from runtime.config import ConfigError as ServeConfigError
from runtime.config import ServeConfig
from runtime.process import cli as serve_cli
from runtime.process.triton_flags import log_ignored


def _args(
    register: Callable[[argparse._SubParsersAction], None], command: str, *argv: str
) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="thaw")
    register(parser.add_subparsers())
    return parser.parse_args([command, *argv])


def _serve(*argv: str) -> ServeConfig:
    return serve_cli.build_config(_args(serve_cli.register, "serve", "repo", *argv))


def _up(tmp_path: Path, *argv: str) -> ActivatorConfig:
    return up_cli.build_config(_args(up_cli.register, "up", str(tmp_path), *argv))


def test_serve_takes_both_in_tritonserver_s_spellings() -> None:
    config = _serve()
    assert (config.reuse_http_port, config.reuse_grpc_port) == (False, False)  # Triton's default
    config = _serve("--reuse-http-port=true", "--reuse-grpc-port", "on")
    assert (config.reuse_http_port, config.reuse_grpc_port) == (True, True)
    config = _serve("--reuse-http-port", "1", "--reuse-grpc-port=false")
    assert (config.reuse_http_port, config.reuse_grpc_port) == (True, False)


def test_up_takes_both_for_its_front_doors(tmp_path: Path) -> None:
    config = _up(tmp_path)
    assert (config.reuse_http_port, config.reuse_grpc_port) == (False, False)
    config = _up(tmp_path, "--reuse-http-port", "TRUE", "--reuse-grpc-port=1")
    assert (config.reuse_http_port, config.reuse_grpc_port) == (True, True)


def test_a_value_that_is_no_boolean_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _serve("--reuse-http-port=maybe")
    assert exit_info.value.code == 2
    assert "'maybe' is not a boolean" in capsys.readouterr().err


def test_true_is_refused_by_name_where_the_system_has_no_so_reuseport(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(socket, "SO_REUSEPORT", raising=False)
    with pytest.raises(ServeConfigError, match="`--reuse-grpc-port` = true: this system has no"):
        _serve("--reuse-grpc-port=true")
    with pytest.raises(UpConfigError, match="`--reuse-http-port` = true: this system has no"):
        _up(tmp_path, "--reuse-http-port=true")
    assert _serve("--reuse-http-port=false").reuse_http_port is False  # false needs nothing


def test_cache_directory_is_accepted_and_logged_as_ignored_on_serve(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Triton's directory of response-cache libraries: thaw's cache is built in."""
    args = _args(serve_cli.register, "serve", "repo", "--cache-directory=/opt/tritonserver/caches")
    with caplog.at_level(logging.WARNING):
        log_ignored(args, ())
    assert (
        "ignoring tritonserver flag --cache-directory=/opt/tritonserver/caches: thaw's response "
        "cache is built in"
    ) in caplog.messages
    _up(tmp_path, "--cache-directory", "/opt/tritonserver/caches")  # accepted on thaw up too
