"""The command-line flags of the slow-client limits (thawserver.connection_limits, and the body
deadline of thawserver.body_deadline), defined once for `thaw up` and `thaw serve`.

One spelling on both CLIs, Thaw's: durations end in `-s` (`--head-timeout-s`). `thaw serve`
also accepts its former, tritonserver-style `-secs` spellings (`--head-timeout-secs`) as
aliases that `--help` does not show (runtime.process.triton_flags).
"""

from __future__ import annotations

import argparse

from thawserver.connection_limits import ConnectionLimits

__all__ = ["BODY_TIMEOUT_S", "add_body_timeout_argument", "add_limit_arguments", "limits_from_args"]

# The default body deadline of both servers, in seconds.
BODY_TIMEOUT_S = 60.0


def add_limit_arguments(parser: argparse._ActionsContainer) -> None:
    """`--head-timeout-s`, `--idle-timeout-s` and `--max-connections` on `parser`."""
    limits = ConnectionLimits()
    parser.add_argument(
        "--head-timeout-s", type=float, default=limits.head_timeout_s, metavar="S",
        help="a request's head (request line and headers) must be complete this many seconds "
        "after the connection's accept or the request's first byte, else 408 and the "
        "connection is closed; the gRPC port's HTTP/2 handshake likewise (0: no deadline; "
        "default %(default)g)",
    )  # fmt: skip
    parser.add_argument(
        "--idle-timeout-s", type=float, default=limits.idle_timeout_s, metavar="S",
        help="a kept-alive connection without a request is closed after this many seconds; "
        "a gRPC connection without calls is sent GOAWAY (0: never; default %(default)g)",
    )  # fmt: skip
    parser.add_argument(
        "--max-connections", type=int, default=None, metavar="N",
        help="open connections per port; past it a new one is answered 503 and closed, and "
        "gRPC calls in flight past it are RESOURCE_EXHAUSTED (0: no cap; default "
        f"{limits.max_connections}, or what the open-file limit leaves when less)",
    )  # fmt: skip


def add_body_timeout_argument(parser: argparse._ActionsContainer, *, also: str = "") -> None:
    """`--body-timeout-s` on `parser` (`also`: what the server adds to the help text)."""
    parser.add_argument(
        "--body-timeout-s", type=float, default=BODY_TIMEOUT_S, metavar="S",
        help="a request body must have arrived this many seconds after its head, else 408 "
        f"Request Timeout{also} (default %(default)g)",
    )  # fmt: skip


def limits_from_args(args: argparse.Namespace) -> ConnectionLimits:
    """The limits the flags of `add_limit_arguments` asked for (not range-checked)."""
    cap = args.max_connections
    return ConnectionLimits(
        head_timeout_s=args.head_timeout_s,
        idle_timeout_s=args.idle_timeout_s,
        max_connections=ConnectionLimits().max_connections if cap is None else cap,
    )
