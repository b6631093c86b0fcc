"""What a forwarded gRPC call reads of its message and its context: the model it names and its
version, the sequence of a stateful model's message, the client metadata that goes on to the
replica, and the replica's gRPC address. Shared by the two forwarded calls,
activator.surfaces.grpc_forward (`ModelInfer`) and activator.surfaces.grpc_stream_relay
(`ModelStreamInfer`).
"""

from __future__ import annotations

from typing import Any

from activator.endpoint.model_endpoint import ModelEndpoint
from activator.endpoint.replica import Replica
from activator.endpoint.sequence_routes import SequenceKey
from activator.errors import BadRequest, UpstreamFailed
from activator.surfaces.grpc_envelope import Envelope, EnvelopeError, envelope, sequence_of
from thawwire.names import canonical_version, version_refusal

__all__ = [
    "Context",
    "forwarded_metadata",
    "message_sequence",
    "message_version",
    "read_envelope",
    "replica_address",
]

# grpc.aio.ServicerContext (grpcio ships no type information).
Context = Any

# Headers that belong to one HTTP/2 hop or to grpc itself, never forwarded.
_HOP_KEYS = ("grpc-", ":")
_HOP_NAMES = frozenset({"user-agent", "content-type", "te", "host", "authority"})


def forwarded_metadata(context: Context) -> tuple[tuple[str, Any], ...]:
    """The client's metadata that goes on to the replica (not grpc's own or one hop's)."""
    return tuple(
        (key, value)
        for key, value in context.invocation_metadata() or ()
        if not key.startswith(_HOP_KEYS) and key not in _HOP_NAMES
    )


def message_version(version: str) -> str | None:
    """A message's `model_version` as Triton reads it (`01` is version 1; "" none), as thaw
    serve reads it; BadRequest (INVALID_ARGUMENT) in Triton's words for what is no version."""
    if not version:
        return None
    canonical = canonical_version(version)
    if canonical is None:
        raise BadRequest(version_refusal(version[:40]))
    return canonical


def read_envelope(data: bytes) -> Envelope:
    """The message's envelope; BadRequest (INVALID_ARGUMENT) for bytes that are none."""
    try:
        return envelope(data)
    except EnvelopeError as exc:
        raise BadRequest(f"the request could not be parsed: {exc}") from None


def message_sequence(endpoint: ModelEndpoint, data: bytes) -> SequenceKey | None:
    """The sequence a stateful model's message names (None for any other model's)."""
    if not endpoint.stateful:
        return None
    try:
        return sequence_of(data)
    except EnvelopeError as exc:
        raise BadRequest(f"the request could not be parsed: {exc}") from None


def replica_address(replica: Replica) -> str:
    """Where `replica` serves gRPC; UpstreamFailed when it serves none."""
    address = replica.handle.grpc_address
    if not address:
        raise UpstreamFailed(f"replica {replica.id} serves no gRPC")
    return address
