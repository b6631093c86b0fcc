"""`thaw serve --front`: the setting, its refusals, and how the native front's binary and
address are found (runtime.process.native_front), without starting a front."""

from __future__ import annotations

import argparse
import stat
from pathlib import Path

import pytest

from runtime.config import ConfigError, ServeConfig
from runtime.errors import ServingError
from runtime.process import cli
from runtime.process import native_front as nf


def _parse(*argv: str) -> ServeConfig:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return cli.build_config(parser.parse_args(["serve", "repo", *argv]))


def test_python_is_the_default_and_native_is_taken() -> None:
    assert _parse().http_front == "python"
    assert _parse("--front", "native").http_front == "native"


def test_an_unknown_front_is_refused_by_the_flag_and_the_setting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        _parse("--front", "rust")
    assert "invalid choice: 'rust'" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="http_front"):
        ServeConfig(repository=Path("r"), http_front="rust").validate()


def test_a_replica_behind_thaw_up_refuses_the_native_front(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="`thaw serve` alone"):
        ServeConfig(
            repository=Path("r"),
            http_front="native",
            handoff_socket=tmp_path / "h.sock",
            front_door="http://127.0.0.1:1",
        ).validate()


def test_the_binary_named_in_the_environment_must_be_executable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = tmp_path / "thaw-front"
    plain.write_text("#!/bin/sh\n")
    monkeypatch.setenv(nf.FRONT_BINARY_ENV, str(plain))
    with pytest.raises(ServingError, match="not an executable file"):
        nf.front_binary()
    plain.chmod(plain.stat().st_mode | stat.S_IXUSR)
    assert nf.front_binary() == plain


def test_without_a_binary_the_error_says_how_to_build_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(nf.FRONT_BINARY_ENV, raising=False)
    monkeypatch.setattr(nf, "_BUILT", tmp_path / "nowhere")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ServingError) as caught:
        nf.front_binary()
    assert "make native" in caught.value.message
    assert nf.FRONT_BINARY_ENV in caught.value.message


@pytest.mark.parametrize(
    ("host", "listen"),
    [("127.0.0.1", "127.0.0.1:8000"), ("::1", "[::1]:8000"), ("", "0.0.0.0:8000")],
)
def test_the_listen_address_is_what_a_socket_would_bind(host: str, listen: str) -> None:
    assert nf._listen_address(host, 8000) == listen


def test_a_host_that_does_not_resolve_is_a_clear_error() -> None:
    with pytest.raises(ServingError, match=r"cannot listen on no-such-host\.invalid:8000"):
        nf._listen_address("no-such-host.invalid", 8000)
