"""The OpenAI routes' `--default-max-tokens` (Triton's OpenAI frontend's flag), defined once
for `thaw serve` and `thaw up`.

`thaw up` hands it to every local replica it starts through the environment
(`replica_environment`), whose `thaw serve` takes its default from there.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from thawserver.handed_defaults import handed, whole_number
from thawwire.openai_api import DEFAULT_MAX_TOKENS

__all__ = ["DEFAULT_MAX_TOKENS_ENV", "add_default_max_tokens_argument", "replica_environment"]

DEFAULT_MAX_TOKENS_ENV = "THAW_DEFAULT_MAX_TOKENS"


def add_default_max_tokens_argument(
    parser: argparse._ActionsContainer, environ: Mapping[str, str]
) -> None:
    """`--default-max-tokens` on `parser`, its default from `environ` (what `thaw up` handed
    on)."""
    parser.add_argument(
        "--default-max-tokens", type=whole_number, metavar="TOKENS",
        default=handed(environ, DEFAULT_MAX_TOKENS_ENV) or DEFAULT_MAX_TOKENS,
        help="the most tokens an OpenAI completion or chat request generates when it sets no "
        "max_tokens / max_completion_tokens (Triton's OpenAI frontend's flag; default "
        "%(default)s)",
    )  # fmt: skip


def replica_environment(args: argparse.Namespace) -> dict[str, str]:
    """The environment that gives `thaw up`'s default to the replicas it starts."""
    return {DEFAULT_MAX_TOKENS_ENV: str(args.default_max_tokens)}
