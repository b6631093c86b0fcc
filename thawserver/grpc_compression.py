"""tritonserver's `--grpc-infer-response-compression-level`: its values and the gRPC server
option that applies one.

A level, not an encoding: gRPC picks the encoding for each call by the level among those the
client says it accepts (`grpc-accept-encoding`), as for Triton (gRPC core picks for both), and a
client that accepts none gets its responses as they are. Triton sets
the level on its inference calls; this server option sets it on every response of the server,
whose other answers are a few bytes that gRPC leaves uncompressed when compressing would not
shrink them.
"""

from __future__ import annotations

import argparse

__all__ = [
    "GRPC_COMPRESSION_LEVELS",
    "add_compression_argument",
    "compression_level",
    "grpc_compression_options",
]

# grpc_compression_level (grpc/impl/compression_types.h) by tritonserver's spelling.
GRPC_COMPRESSION_LEVELS: dict[str, int] = {"none": 0, "low": 1, "medium": 2, "high": 3}


def compression_level(text: str) -> str:
    """A flag's value as tritonserver reads it (case-insensitive); its refusal in its words."""
    level = text.lower()
    if level not in GRPC_COMPRESSION_LEVELS:
        raise argparse.ArgumentTypeError(
            "invalid argument for --grpc_infer_response_compression_level"
        )
    return level


def add_compression_argument(parser: argparse._ActionsContainer, *, responses: str) -> None:
    """The flag on `parser` (into `grpc_response_compression_level`); `responses` says whose
    responses it compresses, for the help."""
    parser.add_argument(
        "--grpc-infer-response-compression-level", dest="grpc_response_compression_level",
        type=compression_level, default="none", metavar="LEVEL",
        help=f"compress {responses} at this level (none, low, medium, high; default none), in "
        "an encoding the client accepts",
    )  # fmt: skip


def grpc_compression_options(level: str) -> list[tuple[str, int]]:
    """The grpc server options for responses compressed at `level` (none: no option)."""
    value = GRPC_COMPRESSION_LEVELS[level]
    return [("grpc.default_compression_level", value)] if value else []
