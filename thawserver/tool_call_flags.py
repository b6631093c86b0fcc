"""The tool-calling flags of the OpenAI routes (`--tool-call-parser`,
`--max-tool-call-parse-bytes`, Triton's OpenAI frontend's), defined once for `thaw serve` and
`thaw up`.

`thaw up` hands them to every local replica it starts through the environment
(`replica_environment`): each replica's `thaw serve` takes its defaults from there, so the
replica command line, which the scaler builds, needs no change.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from thawserver.handed_defaults import handed, whole_number
from thawwire.openai_api import DEFAULT_MAX_TOOL_CALL_PARSE_BYTES, TOOL_CALL_PARSERS

__all__ = ["PARSER_ENV", "PARSE_BYTES_ENV", "add_tool_call_arguments", "replica_environment"]

PARSER_ENV = "THAW_TOOL_CALL_PARSER"
PARSE_BYTES_ENV = "THAW_MAX_TOOL_CALL_PARSE_BYTES"


def add_tool_call_arguments(parser: argparse._ActionsContainer, environ: Mapping[str, str]) -> None:
    """The two flags on `parser`, their defaults from `environ` (what `thaw up` handed on)."""
    default_parser = environ.get(PARSER_ENV) or None
    parser.add_argument(
        "--tool-call-parser", choices=TOOL_CALL_PARSERS, default=default_parser,
        help="read tool calls in chat answers in this model family's format (Triton's OpenAI "
        "frontend's parsers); without it, a chat request with tools (tool_choice auto) is "
        "refused 400",
    )  # fmt: skip
    parser.add_argument(
        "--max-tool-call-parse-bytes", type=whole_number, metavar="BYTES",
        default=handed(environ, PARSE_BYTES_ENV) or DEFAULT_MAX_TOOL_CALL_PARSE_BYTES,
        help="a streamed chat answer read for tool calls ends with finish_reason \"length\" "
        "once its text passes this many bytes (default %(default)s)",
    )  # fmt: skip


def replica_environment(args: argparse.Namespace) -> dict[str, str]:
    """The environment that gives `thaw up`'s flags to the replicas it starts."""
    env = {PARSE_BYTES_ENV: str(args.max_tool_call_parse_bytes)}
    if args.tool_call_parser:
        env[PARSER_ENV] = args.tool_call_parser
    return env
