"""Why a port cannot be listened on, asked of the operating system before grpc is.

grpc's own refusal of a port in use is "Failed to bind to address HOST:PORT; set
GRPC_VERBOSITY=debug ...", and its C core prints the reason (`Address already in use`) on
stderr as a raw log line. `bind_problem` binds a socket the way grpc does (SO_REUSEADDR, no
SO_REUSEPORT) for each address the host resolves to, closes it, and says what the system said;
both servers (`thaw serve`, `thaw up`) ask it first and refuse in their own words. A port of 0
is always free. A port taken between this check and grpc's bind is still grpc's to refuse.
"""

from __future__ import annotations

import socket

__all__ = ["bind_problem"]


def bind_problem(host: str, port: int) -> str | None:
    """Why `host:port` cannot be bound now (the system's words, e.g. `Address already in
    use`), or None when it can (or `port` is 0)."""
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
                sock.bind(address)
        except OSError as exc:
            return exc.strerror or str(exc)
    return None
