"""The command-line flags of the connection limits (thawwire.connection_limits), for both CLIs.

`thaw up` spells durations `-s` (`--head-timeout-s`), `thaw serve` as tritonserver does, `-secs`
(`--head-timeout-secs`); the flags, their defaults and what they mean are the same.
"""

from __future__ import annotations

import argparse
from typing import Literal

from thawwire.connection_limits import ConnectionLimits

__all__ = ["Unit", "add_limit_arguments", "limits_from_args"]

Unit = Literal["s", "secs"]


def add_limit_arguments(parser: argparse._ActionsContainer, unit: Unit) -> None:
    """`--head-timeout-UNIT`, `--idle-timeout-UNIT` and `--max-connections` on `parser`."""
    limits = ConnectionLimits()
    parser.add_argument(
        f"--head-timeout-{unit}", type=float, default=limits.head_timeout_s, metavar="SECS",
        help="a request's head (request line and headers) must be complete this many seconds "
        "after the connection's accept or the request's first byte, else 408 and the "
        "connection is closed; the gRPC port's HTTP/2 handshake likewise (0: no deadline; "
        "default %(default)g)",
    )  # fmt: skip
    parser.add_argument(
        f"--idle-timeout-{unit}", type=float, default=limits.idle_timeout_s, metavar="SECS",
        help="a kept-alive connection without a request is closed after this many seconds; "
        "a gRPC connection without calls is sent GOAWAY (0: never; default %(default)g)",
    )  # fmt: skip
    parser.add_argument(
        "--max-connections", type=int, default=None, metavar="N",
        help="open connections per port; past it a new one is answered 503 and closed, and "
        "gRPC calls in flight past it are RESOURCE_EXHAUSTED (0: no cap; default "
        f"{limits.max_connections}, or what the open-file limit leaves when less)",
    )  # fmt: skip


def limits_from_args(args: argparse.Namespace, unit: Unit) -> ConnectionLimits:
    """The limits the flags of `add_limit_arguments` asked for (not range-checked)."""
    cap = args.max_connections
    return ConnectionLimits(
        head_timeout_s=getattr(args, f"head_timeout_{unit}"),
        idle_timeout_s=getattr(args, f"idle_timeout_{unit}"),
        max_connections=ConnectionLimits().max_connections if cap is None else cap,
    )
