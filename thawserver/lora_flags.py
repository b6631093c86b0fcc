"""The OpenAI routes' `--lora-separator` (Triton's OpenAI frontend's flag), defined once for
`thaw serve` and `thaw up`.

`thaw up` uses it itself (its `/v1/models` lists each `<model><separator><lora>`, and a request
naming one is routed to `<model>`) and hands it to every local replica it starts through the
environment (`replica_environment`), whose `thaw serve` takes its default from there.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

__all__ = ["LORA_SEPARATOR_ENV", "add_lora_argument", "replica_environment"]

LORA_SEPARATOR_ENV = "THAW_LORA_SEPARATOR"


def add_lora_argument(parser: argparse._ActionsContainer, environ: Mapping[str, str]) -> None:
    """`--lora-separator` on `parser`, its default from `environ` (what `thaw up` handed on)."""
    parser.add_argument(
        "--lora-separator", metavar="TEXT", default=environ.get(LORA_SEPARATOR_ENV) or None,
        help="select a model's LoRA adapter (its multi_lora.json) by naming "
        "<model><TEXT><lora> as the OpenAI request's model; /v1/models lists each (Triton's "
        "OpenAI frontend's flag; unset: no LoRA selection)",
    )  # fmt: skip


def replica_environment(args: argparse.Namespace) -> dict[str, str]:
    """The environment that gives `thaw up`'s separator to the replicas it starts."""
    return {LORA_SEPARATOR_ENV: args.lora_separator} if args.lora_separator else {}
