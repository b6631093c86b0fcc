"""`thaw up` takes tritonserver's whole command line, as `thaw serve` does: each of
tritonserver 2.51's flags is applied, given to every replica, accepted and logged as ignored,
or refused naming it (never argparse's "unrecognized arguments")."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest

from activator.errors import ConfigError
from activator.process import cli
from activator.scaler.local.backend import serve_args
from activator.scaler.local_config import LocalConfig
from thawserver.triton_flag_names import (
    IGNORED_FLAGS,
    TRITON_FLAGS,
    add_unsupported_flags,
    log_ignored_flags,
)


def _up() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    cli.register(sub)
    return sub.choices["up"]


def _args(tmp_path: Path, *argv: str) -> argparse.Namespace:
    return _up().parse_args([str(tmp_path), *argv])


def test_every_tritonserver_flag_is_defined_on_thaw_up() -> None:
    defined = _up()._option_string_actions  # the argparse internal add_unsupported_flags reads
    assert all(f"--{flag}" in defined for flag in TRITON_FLAGS)


@pytest.mark.parametrize(
    ("flag", "says"),
    [
        ("--allow-http=false", "thaw up cannot turn its HTTP port off"),
        ("--sagemaker-port=8080", "--sagemaker-port is a thaw serve flag"),
    ],
)  # fmt: skip
def test_a_flag_thaw_up_cannot_apply_is_refused_by_name(
    tmp_path: Path, flag: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        _args(tmp_path, flag)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert says in err
    assert "unrecognized arguments" not in err


def test_a_tritonserver_flag_thaw_up_lacks_would_be_refused_naming_thaw_up(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # thaw up has all of tritonserver 2.51's now; the catch stays for a later one.
    parser = argparse.ArgumentParser()
    add_unsupported_flags(parser, "up")
    with pytest.raises(SystemExit):
        parser.parse_args(["--http-port=8000"])
    assert "tritonserver flag --http-port is not supported by thaw up" in capsys.readouterr().err


def test_http_port_is_ports_tritonserver_name_and_each_port_takes_its_address(
    tmp_path: Path,
) -> None:
    config = cli.build_config(_args(tmp_path, "--http-port=9000", "--allow-http=true"))
    assert (config.port, config.host, config.grpc_host, config.metrics_host) == (
        9000, "127.0.0.1", "127.0.0.1", "127.0.0.1",
    )  # fmt: skip
    config = cli.build_config(
        _args(
            tmp_path,
            "--host",
            "0.0.0.0",
            "--http-address",
            "127.0.0.2",
            "--metrics-address=127.0.0.3",
        )
    )
    # As tritonserver: --http-address is HTTP's alone; the others default to --host.
    assert (config.host, config.grpc_host, config.metrics_host) == (
        "127.0.0.2", "0.0.0.0", "127.0.0.3",
    )  # fmt: skip


def test_flags_without_effect_are_accepted_and_each_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    argv = [f"--{flag}=3" for flag in IGNORED_FLAGS if "vertex-ai" not in flag and "sagemaker"
            not in flag]  # fmt: skip
    args = _args(tmp_path, *argv)
    cli.build_config(args)
    with caplog.at_level(logging.WARNING):
        log_ignored_flags(args, logging.getLogger("test"))
    logged = caplog.text
    assert (
        "ignoring tritonserver flag --http-thread-count=3: thaw's HTTP server runs on one" in logged
    )
    assert "ignoring tritonserver flag --host-policy=3" in logged
    assert logged.count("ignoring tritonserver flag") == len(argv)


def test_device_flags_reach_every_replica_checked_at_start(tmp_path: Path) -> None:
    args = _args(
        tmp_path, "--cuda-memory-pool-byte-size=0:268435456", "--cuda-memory-pool-byte-size",
        "1:0", "--model-load-gpu-limit=0:0.8", "--pinned-memory-pool-byte-size=1048576",
        "--model-load-thread-count", "2", "--min-supported-compute-capability=7.5",
    )  # fmt: skip
    config = cli.build_config(args)
    assert isinstance(config.scaler, LocalConfig)
    argv = serve_args(config, config.scaler)
    at = argv.index("--cuda-memory-pool-byte-size")
    assert argv[at:at + 12] == [
        "--cuda-memory-pool-byte-size", "0:268435456", "--cuda-memory-pool-byte-size", "1:0",
        "--model-load-gpu-limit", "0:0.8", "--pinned-memory-pool-byte-size", "1048576",
        "--model-load-thread-count", "2", "--min-supported-compute-capability", "7.5",
    ]  # fmt: skip
    assert "--pinned-memory-pool-byte-size" not in serve_args(
        cli.build_config(_args(tmp_path)), LocalConfig()
    )


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--cuda-memory-pool-byte-size=0"], "must be <gpu>:<bytes>"),
        (["--cuda-memory-pool-byte-size=0:1", "--cuda-memory-pool-byte-size=0:2"],
         "each at most once"),
        (["--model-load-gpu-limit=0:1.5"], "`--model-load-gpu-limit fraction` = 1.5, must be in"),
        (["--model-load-gpu-limit=a:0.5"], "must be <device_id>:<fraction>"),
        (["--pinned-memory-pool-byte-size=-1"], "`--pinned-memory-pool-byte-size` = -1"),
        (["--model-load-thread-count=0"], "`--model-load-thread-count` = 0, must be in [1, 1024]"),
        (["--min-supported-compute-capability=sm_75"], "must be a compute capability such as"),
    ],
)  # fmt: skip
def test_a_bad_device_flag_stops_thaw_up_at_start(
    tmp_path: Path, argv: list[str], says: str
) -> None:
    with pytest.raises(ConfigError) as info:
        cli.build_config(_args(tmp_path, *argv))
    assert says in info.value.message


def test_device_flags_are_refused_on_kubernetes(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        cli.build_config(
            _args(tmp_path, "--scaler", "kubernetes", "--model-load-thread-count", "2")
        )
    assert "reach replicas with --scaler local only" in info.value.message
