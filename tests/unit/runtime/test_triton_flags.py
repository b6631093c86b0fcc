"""`thaw serve` takes tritonserver's command line: the flags Thaw applies become the config,
the ones without meaning here are accepted and logged, any other tritonserver flag is refused
by name."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest

from runtime.config import ConfigError, ServeConfig
from runtime.process import cli
from runtime.process.triton_flags import (
    IGNORED_FLAGS,
    TRITON_FLAGS,
    add_unsupported_flags,
    backend_settings,
    log_ignored,
)
from thawserver.grpc_compression import grpc_compression_options


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="thaw")
    cli.register(parser.add_subparsers())
    return parser


def _parse(*argv: str) -> ServeConfig:
    return cli.build_config(_parser().parse_args(["serve", *argv]))


def test_a_tritonserver_command_line_becomes_the_config() -> None:
    config = _parse(
        "--model-repository=/models/a", "--model-store", "/models/b", "--http-port=9000",
        "--http-address=0.0.0.0", "--grpc-port=9001", "--grpc-address", "127.0.0.2",
        "--metrics-port=9002", "--metrics-address=127.0.0.3", "--allow-metrics=false",
        "--strict-readiness=false", "--exit-on-error=true", "--disable-auto-complete-config",
        "--log-verbose=1", "--model-load-thread-count=2", "--model-control-mode=explicit",
        "--load-model=add_sub", "--backend-config=python,shm-default-byte-size=1048576",
        "--backend-config=default-max-batch-size=8", "--exit-timeout-secs=5",
    )  # fmt: skip
    assert config.repositories == (Path("/models/a"), Path("/models/b"))
    assert (config.host, config.port) == ("0.0.0.0", 9000)
    assert (config.grpc_host, config.grpc_port) == ("127.0.0.2", 9001)
    assert (config.metrics_host, config.metrics_port, config.allow_metrics) == (
        "127.0.0.3", 9002, False,
    )  # fmt: skip
    assert config.strict_readiness is False and config.exit_on_error is True
    assert config.auto_complete_config is False
    assert config.log_level == "debug" and config.model_load_threads == 2
    assert config.load_models == ("add_sub",) and config.exit_timeout_s == 5
    assert config.backend_setting("python", "shm-default-byte-size") == "1048576"
    assert config.backend_setting("", "default-max-batch-size") == "8"
    assert config.backend_setting("python", "missing") is None


def test_the_positional_repository_goes_first_and_thaw_defaults_hold() -> None:
    config = _parse("repo", "--model-repository", "more")
    assert config.repositories == (Path("repo"), Path("more"))
    assert (config.grpc_port, config.metrics_port) == (8001, 8002)
    assert config.allow_http and config.allow_grpc and config.allow_metrics
    assert config.strict_readiness and not config.exit_on_error and config.auto_complete_config
    assert config.grpc_max_message == config.max_body_bytes == 64 << 20


def test_a_repository_named_twice_is_one_repository(tmp_path: Path) -> None:
    """qa/L0_lifecycle's test_config_override gives tritonserver one directory twice: its
    models are no duplicates of themselves."""
    repo = str(tmp_path / "models")
    config = _parse(
        repo, f"--model-repository={repo}", "--model-repository=more", f"--model-repository={repo}/"
    )
    assert config.repositories == (Path(repo), Path("more"))


def test_exit_on_error_not_given_differs_from_false_given() -> None:
    """Only a given `--exit-on-error=false` keeps a server that failed to start answering."""
    assert _parse("repo").exit_on_error is None
    assert _parse("repo", "--exit-on-error=false").exit_on_error is False


def test_port_zero_makes_every_port_a_free_one_unless_given() -> None:
    config = _parse("repo", "--port", "0")
    assert (config.port, config.grpc_port, config.metrics_port) == (0, 0, 0)
    assert _parse("repo", "--port", "0", "--grpc-port", "8101").grpc_port == 8101


@pytest.mark.parametrize(
    ("yes", "no"), [("true", "false"), ("TRUE", "False"), ("1", "0"), ("on", "off"), ("yes", "no")]
)
def test_triton_booleans(yes: str, no: str) -> None:
    assert _parse("repo", f"--exit-on-error={yes}").exit_on_error is True
    assert _parse("repo", "--exit-on-error", no).exit_on_error is False


def test_strict_model_config_is_the_older_name_of_no_auto_complete() -> None:
    assert _parse("repo", "--strict-model-config=true").auto_complete_config is False
    assert _parse("repo", "--strict-model-config=false").auto_complete_config is True


def test_model_namespacing_and_a_repository_given_twice() -> None:
    assert _parse("repo").model_namespacing is False  # tritonserver's default
    assert _parse("a", "--model-repository=b", "--model-namespacing=true").model_namespacing
    assert _parse("repo", "--model-control-mode=POLL").model_control_mode == "poll"  # any case
    # One directory named twice is one repository, as tritonserver keeps a set of them.
    twice = _parse("a", "--model-repository=b", "--model-repository=./a")
    assert [p.name for p in twice.repositories] == ["a", "b"]


def test_log_flags_lower_the_level() -> None:
    assert _parse("repo", "--log-info=false").log_level == "warning"
    assert _parse("repo", "--log-info=false", "--log-warning=false").log_level == "error"
    assert _parse("repo", "--log-level", "error", "--log-info=false").log_level == "error"


def test_a_tritonserver_flag_a_parser_lacks_is_refused_by_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """thaw serve has every flag of tritonserver 2.51 now; the catch stays for one it lacks
    (a later tritonserver's, or one a parser of Thaw's leaves out)."""
    parser = argparse.ArgumentParser(conflict_handler="resolve")
    add_unsupported_flags(parser)
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--min-supported-compute-capability=6.0"])
    assert exit_info.value.code == 2
    expected = "tritonserver flag --min-supported-compute-capability is not supported by thaw serve"
    assert expected in capsys.readouterr().err


def test_the_minimum_compute_capability_is_read_as_tritonserver_reads_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _parse("repo").min_compute_capability == 6.0
    assert _parse("repo", "--min-supported-compute-capability=7.5").min_compute_capability == 7.5
    assert _parse("repo", "--min-supported-compute-capability", "5").min_compute_capability == 5.0
    for bad in ("sm_75", "-1", "nan"):
        with pytest.raises(SystemExit):
            _parser().parse_args(["serve", "repo", f"--min-supported-compute-capability={bad}"])
        assert "must be a compute capability such as 6.0 or 7.5" in capsys.readouterr().err


def test_the_grpc_response_compression_level_is_read_as_tritonserver_reads_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """qa/L0_grpc starts tritonserver with `--grpc-infer-response-compression-level=high`."""
    assert _parse("repo").grpc_response_compression_level == "none"
    config = _parse("repo", "--grpc-infer-response-compression-level=HIGH")
    assert config.grpc_response_compression_level == "high"
    assert grpc_compression_options(config.grpc_response_compression_level) == [
        ("grpc.default_compression_level", 3)
    ]
    assert grpc_compression_options("none") == []
    with pytest.raises(SystemExit):
        _parse("repo", "--grpc-infer-response-compression-level", "max")
    assert "invalid argument for --grpc_infer_response_compression_level" in (
        capsys.readouterr().err
    )


def test_rate_limit_flags_in_triton_s_forms() -> None:
    """qa/L0_model_update's starts: `--rate-limit=off|execution_count`, resources repeatable,
    `<name>:<count>` for every device or `<name>:<count>:<device>`."""
    assert _parse("repo").rate_limit == "off"
    config = _parse(
        "repo", "--rate-limit=execution_count", "--rate-limit-resource=R1:10",
        "--rate-limit-resource=R2:4:1",
    )  # fmt: skip
    assert config.rate_limit == "execution_count"
    assert config.rate_limit_resources == (("R1", 10, None), ("R2", 4, 1))


def test_a_flag_neither_thaw_nor_triton_has_gets_argparses_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(["serve", "repo", "--no-such-flag"])
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err


def test_every_tritonserver_flag_is_applied_ignored_or_refused() -> None:
    parser = argparse.ArgumentParser(conflict_handler="resolve")
    sub = parser.add_subparsers()
    cli.register(sub)
    serve = sub.choices["serve"]
    defined = serve._option_string_actions  # the argparse internal add_unsupported_flags reads
    assert isinstance(defined, dict)
    assert all(f"--{flag}" in defined for flag in TRITON_FLAGS)
    for flag in IGNORED_FLAGS:
        assert serve.parse_args(["repo", f"--{flag}=3"]).__dict__


def test_a_flag_defined_after_the_catch_replaces_it() -> None:
    # Another part of `thaw serve` may define a tritonserver flag later (e.g. --cache-config).
    parser = argparse.ArgumentParser(conflict_handler="resolve")
    add_unsupported_flags(parser)
    parser.add_argument("--cache-config", default=None)
    assert parser.parse_args(["--cache-config=local,size=1"]).cache_config == "local,size=1"


def test_backend_config_forms() -> None:
    assert backend_settings(["python,shm-growth-byte-size=64", "a=b", "onnxruntime,x=1,2"]) == (
        ("python", "shm-growth-byte-size", "64"), ("", "a", "b"), ("onnxruntime", "x", "1,2"),
    )  # fmt: skip
    # tritonserver's refusals, in its words (qa/L0_backend_config's starts that must fail)
    for bad in ("python", "python,=3", "=3", "default-max-batch-size=", "tensorflow,x=", "x"):
        with pytest.raises(ValueError, match="--backend-config option format is"):
            backend_settings([bad])
    with pytest.raises(ValueError, match=r"^No backend specified\. --backend-config option"):
        backend_settings([",default-max-batch-size=3"])
    with pytest.raises(ConfigError, match="--backend-config option format is"):
        _parse("repo", "--backend-config=python")


@pytest.mark.parametrize(
    "value", ["abc", "1e3", "0x10", "1_000", "99999999999999999999", "2147483648", "\u0667"]
)
def test_a_default_max_batch_size_that_is_no_int32_stops_the_start(value: str) -> None:
    # it becomes a config's max_batch_size (an int32): refused at start, naming the flag
    with pytest.raises(ConfigError, match=r"default-max-batch-size=.*not an integer up to"):
        _parse("repo", f"--backend-config=onnxruntime,default-max-batch-size={value}")


def test_default_max_batch_size_reads_the_backends_then_the_global_setting() -> None:
    assert _parse("repo").default_max_batch_size == 4
    config = _parse(
        "repo", "--backend-config=default-max-batch-size=7",
        "--backend-config=onnxruntime,default-max-batch-size=2147483647",
        "--backend-config=tensorflow,default-max-batch-size=9",
    )  # fmt: skip
    assert config.default_max_batch_size == 2147483647
    assert _parse("repo", "--backend-config=default-max-batch-size=-3").default_max_batch_size == 0


def test_model_load_gpu_limits_one_per_gpu_the_last_wins() -> None:
    config = _parse("repo", "--model-load-gpu-limit=0:0.5", "--model-load-gpu-limit", "1:0.25",
                    "--model-load-gpu-limit=0:0.75")  # fmt: skip
    assert dict(config.model_load_gpu_limits) == {0: 0.75, 1: 0.25}
    assert _parse("repo").model_load_gpu_limits == ()


def test_ignored_flags_and_settings_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    args = _parser().parse_args(
        ["serve", "repo", "--http-thread-count=8",
         "--backend-config=python,shm-default-byte-size=1024",
         "--backend-config=tensorflow,version=2", "--host-policy=gpu_0,numa-node=0",
         "--enable-peer-access=false", "--cuda-virtual-address-size=0:1"]
    )  # fmt: skip
    config = cli.build_config(args)
    with caplog.at_level(logging.INFO, logger="runtime.process.triton_flags"):
        log_ignored(args, config.backend_config)
    text = caplog.text
    assert "ignoring tritonserver flag --http-thread-count=8" in text
    assert "ignoring tritonserver flag --host-policy=gpu_0,numa-node=0: thaw binds no" in text
    assert "ignoring tritonserver flag --enable-peer-access=false" in text
    assert "ignoring tritonserver flag --cuda-virtual-address-size=0:1" in text
    assert "backend config python,shm-default-byte-size=1024 accepted" in text
    assert "ignoring backend config tensorflow,version=2: thaw does not use it" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "no model repository"),
        (["repo", "--grpc-port=70000"], "`grpc_port` = 70000, must be in [0, 65535]"),
        (["repo", "--model-load-thread-count=0"], "`model_load_threads` = 0, must be in"),
        (["repo", "--allow-http=false", "--allow-grpc=false"], "nothing to serve"),
        (["repo", "--grpc-max-message-bytes=10"], "`grpc_max_message_bytes` = 10"),
        (["repo", f"--max-body-bytes={1 << 32}"], "over gRPC's 2 GiB message limit"),
        (["repo", "--rate-limit=sometimes"], "Invalid rate limit mode: sometimes"),
        (["repo", "--rate-limit-resource=R1"], "option format is '<resource_name>:<count>"),
        (["repo", "--model-load-gpu-limit=0"], "must be <device_id>:<fraction>"),
        (["repo", "--model-load-gpu-limit=a:0.5"], "must be <device_id>:<fraction>"),
        (["repo", "--model-load-gpu-limit=0:2"], "`model_load_gpu_limit fraction` = 2, must be"),
    ],
)
def test_bad_settings_name_themselves(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        _parse(*argv)


def test_log_and_trace_flags_become_the_extensions_start_settings() -> None:
    config = _parse(
        "repo", "--log-file=server.log", "--log-format=ISO8601", "--log-verbose=2",
        "--log-warning=false", "--trace-config", "triton,file=t.log", "--trace-config",
        "level=TIMESTAMPS", "--trace-rate=5", "--trace-count", "7",
    )  # fmt: skip
    logs = config.log_settings
    assert (logs.file, logs.format, logs.verbose_level, logs.warning) == (
        "server.log",
        "ISO8601",
        2,
        False,
    )
    trace = config.trace_defaults
    assert (trace.file, trace.level, trace.rate, trace.count) == ("t.log", {"TIMESTAMPS"}, 5, 7)


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--log-format=JSON", "invalid argument for log_format, got: JSON"),
        ("--trace-config=opentelemetry,url=x", "'opentelemetry' is not supported"),
        ("--trace-level=LOUD", "invalid value for trace level option: LOUD"),
    ],
)
def test_bad_log_and_trace_flags_are_config_errors(flag: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _parse("repo", flag)


def test_a_listener_turned_off_has_its_port_ignored_as_tritonserver_does() -> None:
    # qa/L0_socket starts tritonserver with `--http-port -47 --allow-http 0` and expects it up.
    config = _parse("/models", "--http-port", "-47", "--allow-http", "0")
    assert not config.allow_http and config.grpc_port == 8001
    config = _parse(
        "/models",
        *("--grpc-port", "-47", "--allow-grpc", "false"),
        *("--metrics-port", "-47", "--allow-metrics", "0"),
    )
    assert not (config.allow_grpc or config.allow_metrics) and config.port == 8000
    with pytest.raises(ConfigError, match="`port` = -47"):
        _parse("/models", "--http-port", "-47")  # on: refused, naming it


def test_http_address_is_https_alone_and_host_every_listeners_default() -> None:
    config = _parse("/models", "--http-address", "-47", "--allow-http", "0")
    assert config.host == "-47"
    assert config.grpc_host == "127.0.0.1" and config.metrics_host == "127.0.0.1"
    config = _parse("/models", "--host", "0.0.0.0")  # Thaw's own flag: every listener
    assert config.host == "0.0.0.0" and config.grpc_host is None and config.metrics_host is None
    config = _parse(
        "/models", "--host", "0.0.0.0", "--http-address", "127.0.0.2", "--grpc-address", "::1"
    )
    assert (config.host, config.grpc_host, config.metrics_host) == ("127.0.0.2", "::1", "0.0.0.0")
