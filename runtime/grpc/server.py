"""The runtime's gRPC listener: a grpc.aio server for runtime.grpc.handlers, bound, capped, stopped.

Its limits: a message over `grpc_max_message` bytes is refused by grpc itself with
RESOURCE_EXHAUSTED before any of it is parsed; `SO_REUSEPORT` is off unless tritonserver's
`--reuse-grpc-port` is true (thawserver.reuse_port_flags), so a port already in use is an error
instead of a port silently shared with another server; at most `MAX_STREAMS_PER_CONNECTION`
calls at once on one client connection; and the connection limits of `--head-timeout-s`,
`--idle-timeout-s` and `--max-connections` (thawserver.connection_limits.grpc_server_options).
Responses are compressed at tritonserver's `--grpc-infer-response-compression-level`
(thawserver.grpc_compression); keepalive and HTTP/2 pings follow tritonserver's flags
(thawserver.grpc_keepalive). With tritonserver's `--grpc-use-ssl[-mutual]` it listens over TLS
(thawserver.grpc_tls), and nothing else changes.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import grpc

from runtime.config import ServeConfig
from runtime.errors import ServingError
from thawserver.connection_limits import grpc_max_concurrent_rpcs, grpc_server_options
from thawserver.grpc_bind import bind_grpc_port
from thawserver.grpc_compression import grpc_compression_options
from thawserver.grpc_keepalive import grpc_keepalive_options
from thawserver.grpc_tls import GrpcTls, server_credentials

__all__ = ["MAX_STREAMS_PER_CONNECTION", "GrpcServer"]

logger = logging.getLogger(__name__)

MAX_STREAMS_PER_CONNECTION = 1024
# Responses are ours: Triton's limit (INT32_MAX), the most a gRPC message can be.
_MAX_SEND_BYTES = (1 << 31) - 1


class GrpcServer:
    """One gRPC server for `routes` (a generic handler), bound to the config's address."""

    def __init__(
        self, config: ServeConfig, routes: Any, *, unix_socket: Path | None = None
    ) -> None:
        # `unix_socket`: listen there instead, privately, behind the native front (which takes
        # the gRPC port: runtime.process.native_front); plaintext, as the front speaks it.
        self._unix_socket = unix_socket
        self._host = config.grpc_host or config.host
        self._port = config.grpc_port
        self._tls = config.grpc_tls
        self._reuse_port = config.reuse_grpc_port
        self._server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", config.grpc_max_message),
                ("grpc.max_send_message_length", _MAX_SEND_BYTES),
                ("grpc.so_reuseport", int(config.reuse_grpc_port)),
                ("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION),
                *grpc_server_options(config.connections),
                *grpc_compression_options(config.grpc_response_compression_level),
                *grpc_keepalive_options(config.grpc_keepalive),
            ],
            maximum_concurrent_rpcs=grpc_max_concurrent_rpcs(config.connections),
        )
        self._server.add_generic_rpc_handlers((routes,))
        self.address = ""

    async def start(self) -> str:
        """Bind and start serving; the bound address (`HOST:PORT`, the port chosen when 0).
        ServingError when the address cannot be bound."""
        if self._unix_socket is not None:
            self.address = f"unix:{self._unix_socket}"
            try:
                bound = self._server.add_insecure_port(self.address)
            except RuntimeError as exc:
                raise ServingError(f"cannot listen on {self.address}: {exc}") from exc
            if not bound:
                raise ServingError(f"cannot listen on {self.address}")
            await self._server.start()
            logger.info("gRPC service behind the native front on %s", self.address)
            return self.address
        try:
            credentials = server_credentials(self._tls) if self._tls is not None else None
            address = bind_grpc_port(
                self._server, self._host, self._port, credentials, reuse_port=self._reuse_port
            )
        except OSError as exc:
            raise ServingError(str(exc)) from exc
        await self._server.start()
        self.address = address
        # tritonserver's words: scripts wait for this line.
        logger.info("Started GRPCInferenceService at %s%s", self.address, _tls_words(self._tls))
        return self.address

    async def stop(self, grace_s: float) -> None:
        """Stop accepting calls; calls in flight get `grace_s` seconds, then are cancelled."""
        await self._server.stop(grace_s)


def _tls_words(tls: GrpcTls | None) -> str:
    if tls is None:
        return ""
    return " (TLS, client certificates required)" if tls.mutual else " (TLS)"
