"""How many bytes a server sends while a call runs: a one-connection TCP proxy that counts them
(what a test of response compression observes, since gRPC clients decompress unseen)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

__all__ = ["bytes_served"]


def bytes_served(address: str, call: Callable[[str], None]) -> int:
    """Bytes the server at `address` (HOST:PORT) sent while `call(proxy_address)` ran, its one
    connection made through the proxy."""
    served = [0]
    listener = socket.create_server(("127.0.0.1", 0))

    def pipe(src: socket.socket, dst: socket.socket, count: bool) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(1 << 16):
                served[0] += len(data) if count else 0
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def accept() -> None:
        client, _ = listener.accept()
        host, port = address.rsplit(":", 1)
        upstream = socket.create_connection((host, int(port)))
        threading.Thread(target=pipe, args=(client, upstream, False), daemon=True).start()
        pipe(upstream, client, True)

    forwarder = threading.Thread(target=accept, daemon=True)
    forwarder.start()
    try:
        call(f"127.0.0.1:{listener.getsockname()[1]}")
    finally:
        forwarder.join(10)
        listener.close()
    return served[0]
