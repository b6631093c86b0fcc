"""Where a gRPC server listens: both servers' one bind (`thaw serve`'s, `thaw up`'s front door).

    bind_grpc_port(server, host, port, credentials=None, *, reuse_port=False)
                                        the server bound (over TLS with `credentials`,
                                        thawserver.grpc_tls), its `HOST:PORT` (the port chosen
                                        for 0); OSError "cannot listen for gRPC on HOST:PORT: why"
    bind_problem(host, port, *, reuse_port=False)
                                        why `host:port` cannot be bound now, in the system's words

grpc's own refusal of a port in use is "Failed to bind to address HOST:PORT; set
GRPC_VERBOSITY=debug ...", and its C core prints the reason (`Address already in use`) on stderr
as a raw log line. So the operating system is asked first: a socket bound the way grpc binds
(SO_REUSEADDR; SO_REUSEPORT only with `reuse_port`, the server's `grpc.so_reuseport` option,
tritonserver's `--reuse-grpc-port`, thawserver.reuse_port_flags) for each address the host
resolves to, then closed. A port of 0 is always free; a port taken between this check and grpc's
bind is still grpc's to refuse.
"""

from __future__ import annotations

import socket
from typing import Any

__all__ = ["bind_grpc_port", "bind_problem"]


def _target_host(host: str) -> str:
    """`host` as a gRPC target writes it (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host else host


def bind_grpc_port(
    server: Any, host: str, port: int, credentials: Any = None, *, reuse_port: bool = False
) -> str:
    """Bind `server` (a `grpc.aio.Server`, not started) to `host:port`, plaintext or, with
    `credentials` (`grpc.ServerCredentials`), TLS; its bound `HOST:PORT`. `reuse_port`: the
    server was made with `("grpc.so_reuseport", 1)`, so a port other such servers hold is free
    to it."""
    target = f"{_target_host(host)}:{port}"
    problem = bind_problem(host, port, reuse_port=reuse_port)
    if problem is not None:
        raise OSError(f"cannot listen for gRPC on {target}: {problem}")
    try:
        if credentials is None:
            bound = server.add_insecure_port(target)
        else:
            bound = server.add_secure_port(target, credentials)
    except RuntimeError as exc:  # grpcio >= 1.50: "Failed to bind to address ..."
        raise OSError(f"cannot listen for gRPC on {target}: {exc}") from exc
    if bound == 0:  # older grpcio report a failed bind this way
        raise OSError(f"cannot listen for gRPC on {target}: address unavailable")
    return f"{_target_host(host)}:{bound}"


def bind_problem(host: str, port: int, *, reuse_port: bool = False) -> str | None:
    """Why `host:port` cannot be bound now (the system's words, e.g. `Address already in
    use`), or None when it can (or `port` is 0). `reuse_port`: bound with SO_REUSEPORT, so a
    port held only by sockets that set it too is free."""
    if port == 0:
        return None
    try:
        addresses = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        return f"cannot resolve {host!r}: {exc.strerror}"
    for family, kind, proto, _, address in addresses:
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if reuse_port:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                sock.bind(address)
        except OSError as exc:
            return exc.strerror or str(exc)
    return None
