"""The tool-calling flags: one spelling on both CLIs, and `thaw up` handing them to the
replicas it starts through their environment, which `thaw serve` reads as the defaults."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from runtime.config import ConfigError, ServeConfig
from thawserver.tool_call_flags import add_tool_call_arguments, replica_environment


def _parse(argv: list[str], environ: dict[str, str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_tool_call_arguments(parser, environ)
    return parser.parse_args(argv)


def test_thaw_ups_flags_reach_a_replica_through_its_environment() -> None:
    up = _parse(["--tool-call-parser", "mistral", "--max-tool-call-parse-bytes", "512"], {})
    replica = _parse([], replica_environment(up))
    assert (replica.tool_call_parser, replica.max_tool_call_parse_bytes) == ("mistral", 512)
    # a flag on the replica's own command line wins
    assert _parse(["--tool-call-parser", "llama3"], replica_environment(up)).tool_call_parser == (
        "llama3"
    )


def test_no_parser_and_the_default_limit() -> None:
    args = _parse([], {})
    assert (args.tool_call_parser, args.max_tool_call_parse_bytes) == (None, 128 * 1024)
    assert _parse([], replica_environment(args)).tool_call_parser is None


def test_an_unknown_parser_is_refused() -> None:
    with pytest.raises(SystemExit):
        _parse(["--tool-call-parser", "hermes"], {})
    with pytest.raises(ConfigError, match="tool_call_parser"):
        ServeConfig(repository=Path("."), tool_call_parser="hermes")
    with pytest.raises(ConfigError, match="max_tool_call_parse_bytes"):
        ServeConfig(repository=Path("."), max_tool_call_parse_bytes=0)
