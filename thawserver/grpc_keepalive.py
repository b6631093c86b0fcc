"""tritonserver's gRPC keepalive and HTTP/2 ping flags: their values, and the gRPC server
options that apply them (on `thaw serve`'s gRPC port and `thaw up`'s gRPC front door).

    --grpc-keepalive-time MS                       ping an idle transport after MS (7200000)
    --grpc-keepalive-timeout MS                    close it when a ping is not acked in MS (20000)
    --grpc-keepalive-permit-without-calls BOOL     let clients ping with no call open (false)
    --grpc-http2-max-pings-without-data N          pings sent with no data between (2; 0: any)
    --grpc-http2-min-recv-ping-interval-without-data MS
                                                   a client ping sooner than MS after the last
                                                   is a strike (300000)
    --grpc-http2-max-ping-strikes N                strikes before GOAWAY (2; 0: any number)
    --grpc-max-connection-age MS                   GOAWAY a connection this old (0: never)
    --grpc-max-connection-age-grace MS             then close it after MS more (0: never)

The defaults are Triton 2.51's (src/grpc/grpc_server.h), which are gRPC core's own, so a
server given none of the flags behaves as before. As with Triton, a client's keepalive
settings must agree with the server's: a client that pings more often than the server permits
is sent GOAWAY ("too_many_pings"). Values are whole milliseconds or counts, 0 or more, up to
2^31 - 1 (gRPC's int channel arguments); anything else is refused at start.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields

from thawserver.bool_flag import triton_bool

__all__ = ["GrpcKeepalive", "add_keepalive_arguments", "grpc_keepalive_options", "keepalive_from"]

_INT_MAX = (1 << 31) - 1


@dataclass(frozen=True, slots=True)
class GrpcKeepalive:
    """The settings, by tritonserver's defaults; 0 for the connection ages: not set."""

    keepalive_time_ms: int = 7_200_000
    keepalive_timeout_ms: int = 20_000
    keepalive_permit_without_calls: bool = False
    http2_max_pings_without_data: int = 2
    http2_min_recv_ping_interval_without_data_ms: int = 300_000
    http2_max_ping_strikes: int = 2
    max_connection_age_ms: int = 0
    max_connection_age_grace_ms: int = 0


# field -> (tritonserver's flag, its help)
_FLAGS: dict[str, tuple[str, str]] = {
    "keepalive_time_ms": (
        "--grpc-keepalive-time", "ping an idle client connection after MS (default 7200000)"),
    "keepalive_timeout_ms": (
        "--grpc-keepalive-timeout",
        "close a connection whose ping is not acknowledged within MS (default 20000)"),
    "keepalive_permit_without_calls": (
        "--grpc-keepalive-permit-without-calls",
        "let clients send keepalive pings with no call open (default false)"),
    "http2_max_pings_without_data": (
        "--grpc-http2-max-pings-without-data",
        "pings sent with no data frame between them (default 2; 0: no limit)"),
    "http2_min_recv_ping_interval_without_data_ms": (
        "--grpc-http2-min-recv-ping-interval-without-data",
        "a client ping sooner than MS after the last, with no data, is a strike "
        "(default 300000)"),
    "http2_max_ping_strikes": (
        "--grpc-http2-max-ping-strikes",
        "strikes before the connection is sent GOAWAY (default 2; 0: no limit)"),
    "max_connection_age_ms": (
        "--grpc-max-connection-age", "send GOAWAY to a connection MS old (default: never)"),
    "max_connection_age_grace_ms": (
        "--grpc-max-connection-age-grace",
        "then close it after MS more for its calls to finish (default: never)"),
}  # fmt: skip

# field -> gRPC core's channel argument
_OPTIONS: dict[str, str] = {
    "keepalive_time_ms": "grpc.keepalive_time_ms",
    "keepalive_timeout_ms": "grpc.keepalive_timeout_ms",
    "keepalive_permit_without_calls": "grpc.keepalive_permit_without_calls",
    "http2_max_pings_without_data": "grpc.http2.max_pings_without_data",
    "http2_min_recv_ping_interval_without_data_ms": "grpc.http2.min_ping_interval_without_data_ms",
    "http2_max_ping_strikes": "grpc.http2.max_ping_strikes",
    "max_connection_age_ms": "grpc.max_connection_age_ms",
    "max_connection_age_grace_ms": "grpc.max_connection_age_grace_ms",
}


def _whole(text: str) -> int:
    """A flag's value: a whole number from 0 to 2^31 - 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid whole number {text!r}") from None
    if not 0 <= value <= _INT_MAX:
        raise argparse.ArgumentTypeError(f"{value} is not in [0, {_INT_MAX}]")
    return value


def add_keepalive_arguments(parser: argparse._ActionsContainer) -> None:
    """The flags on `parser` (into `grpc_<field>`; unset: None, the default)."""
    for name, (flag, text) in _FLAGS.items():
        kind = triton_bool if name == "keepalive_permit_without_calls" else _whole
        metavar = "BOOL" if kind is triton_bool else ("MS" if name.endswith("_ms") else "N")
        parser.add_argument(
            flag, dest=f"grpc_{name}", type=kind, default=None, metavar=metavar, help=text
        )


def keepalive_from(args: argparse.Namespace) -> GrpcKeepalive:
    """The settings the parsed flags ask for (the defaults for those not given)."""
    given = {f.name: getattr(args, f"grpc_{f.name}", None) for f in fields(GrpcKeepalive)}
    return GrpcKeepalive(**{k: v for k, v in given.items() if v is not None})


def grpc_keepalive_options(settings: GrpcKeepalive) -> list[tuple[str, int]]:
    """The gRPC server options for `settings` (the connection ages only when set)."""
    options: list[tuple[str, int]] = []
    for name, option in _OPTIONS.items():
        value = int(getattr(settings, name))
        if name.startswith("max_connection_age") and value == 0:
            continue
        options.append((option, value))
    return options
