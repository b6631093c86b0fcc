"""tritonserver's `--reuse-http-port` and `--reuse-grpc-port`, for both CLIs: SO_REUSEPORT on
the HTTP and the gRPC listening sockets.

    add_reuse_port_arguments(group)     both flags (BOOL, default false, tritonserver's)
    check_reuse_port(args)              ValueError naming a flag set true on a system without
                                        SO_REUSEPORT

With a flag true, several servers (processes of the same user) can listen on one port at once
and the kernel spreads new connections between them; a server started without it on a port
another holds is refused ("Address already in use"), as is one with it on a port held by a
socket without it. Thaw's HTTP front is one event loop a process, so this is also how one
port's load reaches several cores. The metrics port is not affected (tritonserver has no such
flag for it).
"""

from __future__ import annotations

import argparse
import socket

from thawserver.bool_flag import triton_bool

__all__ = ["add_reuse_port_arguments", "check_reuse_port"]

# flag's surface -> what the help calls its port
_SURFACES = {"http": "HTTP", "grpc": "gRPC"}


def add_reuse_port_arguments(parser: argparse._ActionsContainer) -> None:
    """Both flags on `parser` (into `reuse_http_port`, `reuse_grpc_port`)."""
    for surface, name in _SURFACES.items():
        parser.add_argument(
            f"--reuse-{surface}-port", type=triton_bool, default=False, metavar="BOOL",
            help=f"listen on the {name} port with SO_REUSEPORT, so several servers "
            "can share it and the kernel spreads connections between them (default false: a "
            "port in use refuses the start)",
        )  # fmt: skip


def check_reuse_port(args: argparse.Namespace) -> None:
    """ValueError when a flag is true but this system has no SO_REUSEPORT (e.g. Windows)."""
    if hasattr(socket, "SO_REUSEPORT"):
        return
    for surface in _SURFACES:
        if getattr(args, f"reuse_{surface}_port"):
            raise ValueError(f"`--reuse-{surface}-port` = true: this system has no SO_REUSEPORT")
