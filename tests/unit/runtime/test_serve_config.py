"""`thaw serve` settings: flags become one ServeConfig; bad values name the setting and range."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import pytest

from runtime.config import ConfigError, ModelControlMode, ServeConfig
from runtime.http.response_encoding import compress_body, pick_encoding
from runtime.process import cli
from thawserver.redaction import Redactor
from thawserver.restricted_protocols import Category, Restriction


def _parse(*argv: str) -> ServeConfig:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return cli.build_config(parser.parse_args(["serve", *argv]))


def test_flags_become_the_config() -> None:
    config = _parse(
        "repo", "--port", "0", "--model-control-mode", "explicit", "--load-model", "a",
        "--load-model", "b", "--preload-frameworks", "onnxruntime, torch", "--max-body-bytes",
        "2048", "--arena-bytes", "4096", "--log-level", "DEBUG", "--target", "cuda:sm_90",
    )  # fmt: skip
    assert config.repository == Path("repo")
    assert config.port == 0
    assert config.model_control_mode is ModelControlMode.EXPLICIT
    assert config.load_models == ("a", "b")
    assert config.preload_frameworks == ("onnxruntime", "torch")
    assert config.max_body_bytes == 2048
    assert config.arena_bytes == 4096
    assert config.log_level == "debug"
    assert config.target == "cuda:sm_90"


def test_image_tier_flags_become_the_config() -> None:
    config = _parse(
        "repo", "--cache", "c", "--cache-max-bytes", "1000", "--host-cache-bytes", "2000",
        "--host-cache", "/dev/shm/t",
    )  # fmt: skip
    assert (config.cache_max_bytes, config.host_cache_bytes) == (1000, 2000)
    assert config.host_cache == Path("/dev/shm/t") and config.fork_server_fd is None
    assert _parse("repo").host_cache_bytes == 0 and _parse("repo").cache_max_bytes is None


def test_defaults_match_the_documented_interface() -> None:
    config = _parse("repo")
    assert (config.host, config.port) == ("127.0.0.1", 8000)
    assert config.model_control_mode is ModelControlMode.NONE
    assert config.max_body_bytes == 64 * 1024 * 1024
    assert config.repository_poll_secs == 15.0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"port": 70000}, "`port` = 70000, must be in [0, 65535]"),
        ({"port": -1}, "`port` = -1, must be in [0, 65535]"),
        ({"max_body_bytes": 0}, "`max_body_bytes` = 0, must be in"),
        ({"repository_poll_secs": float("nan")}, "`repository_poll_secs` = nan, must be in"),
        ({"exit_timeout_s": -1.0}, "`exit_timeout_s` = -1, must be in [0, 3600]"),
        ({"max_json_depth": 1}, "`max_json_depth` = 1, must be in"),
        ({"target": "tpu"}, "`target` = 'tpu', must be one of auto, cpu, cuda, cuda:sm_NN"),
        (
            {"target": "cuda:foo"},
            "`target` = 'cuda:foo', must be one of auto, cpu, cuda, cuda:sm_NN",
        ),
        ({"target": "cuda:sm_9"}, "`target` = 'cuda:sm_9', must be one of"),
        ({"preload_frameworks": ("jax",)}, "`preload_frameworks` = 'jax'"),
        ({"event_loop": "trio"}, "`event_loop` = 'trio'"),
        ({"cache_max_bytes": 0}, "`cache_max_bytes` = 0, must be in [1, "),
        ({"host_cache_bytes": -1}, "`host_cache_bytes` = -1, must be in [0, "),
        ({"fork_server_fd": 1}, "`fork_server_fd` = 1, must be in [3, "),
    ],
)
def test_out_of_range_settings_are_refused_in_one_phrasing(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        ServeConfig(repository=Path("."), **overrides)  # type: ignore[arg-type]
    assert str(info.value).startswith(message)


def test_config_is_frozen() -> None:
    config = ServeConfig(repository=Path("."))
    with pytest.raises(AttributeError):
        config.port = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        ("gzip", "gzip"),
        ("deflate", "deflate"),
        ("br, gzip;q=0.5", "gzip"),
        ("gzip;q=0, deflate", "deflate"),
        ("identity", None),
        ("*", None),
        ("gzip;q=bogus", None),
    ],
)
def test_response_encoding_follows_accept_encoding(accept: str, expected: str | None) -> None:
    assert pick_encoding(accept) == expected


def test_compressed_bodies_are_standard_gzip_and_zlib() -> None:
    import gzip
    import zlib

    body = b'{"outputs": []}' * 100
    assert gzip.decompress(compress_body(body, "gzip")) == body
    assert zlib.decompress(compress_body(body, "deflate")) == body


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.1:0", "host:99999", ":8001", "h:x"])
def test_front_door_grpc_must_be_host_and_port(address: str) -> None:
    door = {"handoff_socket": Path("s"), "front_door": "http://127.0.0.1:8000"}
    with pytest.raises(ConfigError, match="front_door_grpc"):
        ServeConfig(repository=Path("."), front_door_grpc=address, **door)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs `front_door`"):
        ServeConfig(repository=Path("."), front_door_grpc="127.0.0.1:8001")
    ok = ServeConfig(repository=Path("."), front_door_grpc="[::1]:8001", **door)  # type: ignore[arg-type]
    assert ok.front_door_grpc == "[::1]:8001"


def test_text_settings_are_parsed_once_when_the_config_is_built() -> None:
    config = ServeConfig(
        repository=Path("/srv/models"),
        cache=Path("/var/cache/thaw"),
        http_header_forward_pattern="^x-",
        grpc_header_forward_pattern="(?-i)^Y-",
        http_restricted_apis=("inference,health:x-key=1",),
        grpc_restricted_protocols=("metadata:k=v",),
    )
    assert config.http_header_forward is not None and config.grpc_header_forward is not None
    assert config.http_header_forward.search("X-Trace")  # case-insensitive, as Triton's
    assert config.grpc_header_forward.search("y-a") is None  # (?-i): case-sensitive
    assert config.http_restrictions == {
        Category.INFERENCE: Restriction("x-key", "1", "API"),
        Category.HEALTH: Restriction("x-key", "1", "API"),
    }
    assert config.grpc_restrictions == {
        Category.METADATA: Restriction("triton-grpc-protocol-k", "v")
    }
    assert config.redactor("/srv/models/a/config.pbtxt: bad") == "a/config.pbtxt: bad"
    assert config.redactor("/var/cache/thaw/x: gone") == "x: gone"
    plain = ServeConfig(repository=Path("."))
    assert plain.http_header_forward is None and plain.grpc_header_forward is None
    assert plain.http_restrictions == {} and plain.grpc_restrictions == {}
    # Derived again from the new settings when a config is rewritten (dataclasses.replace).
    moved = replace(config, repository=Path("/other"), http_restricted_apis=())
    assert moved.http_restrictions == {} and moved.redactor("/other/m") == "m"
    assert moved.redactor("/srv/models/m") == "/srv/models/m"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"http_restricted_apis": ("inference",)}, "--http-restricted-api option format is"),
        ({"grpc_restricted_protocols": ("bogus:k=v",)}, "unknown restricted protocol 'bogus'"),
        ({"http_header_forward_pattern": "["}, "`http_header_forward_pattern` = '['"),
    ],
)
def test_text_settings_that_do_not_parse_fail_the_config(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        ServeConfig(repository=Path("."), **overrides)  # type: ignore[arg-type]
    assert str(info.value).startswith(message)


def test_every_surface_reads_the_parsed_values_and_builds_no_redactor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The HTTP app, its metrics app and the gRPC handlers take the config's one Redactor
    (and its parsed patterns and restrictions): none of them builds another."""
    from runtime.grpc.handlers import GrpcHandlers
    from runtime.http.app import HANDLERS, REDACT, build_app, build_metrics_app
    from runtime.models.lifecycle import ServerState
    from tests.fakes.model_service import FakeModelService

    config = ServeConfig(repository=Path("."), http_restricted_apis=("health:k=v",))

    def no_second(self: Redactor, roots: object) -> None:
        raise AssertionError("a surface built its own Redactor")

    monkeypatch.setattr(Redactor, "__init__", no_second)
    app = build_app(config, FakeModelService(), _NoMetrics())  # type: ignore[arg-type]
    metrics_app = build_metrics_app(config, app[HANDLERS])
    GrpcHandlers(config, FakeModelService(), ServerState())  # type: ignore[arg-type]
    assert app[REDACT] is config.redactor and metrics_app[REDACT] is config.redactor


class _NoMetrics:
    def exposition(self) -> bytes:
        return b""
