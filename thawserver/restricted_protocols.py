"""tritonserver's `--grpc-restricted-protocol=<protocols>:<key>=<value>` and
`--http-restricted-api=<apis>:<key>=<value>`: the gRPC methods a client may call only with the
metadata `triton-grpc-protocol-<key>: <value>`, the HTTP endpoints only with the header
`<key>: <value>`.

As Triton 2.51 (src/command_line_parser.cc ParseRestrictedFeatureOption, src/grpc/,
src/http_server.cc): the names are Triton's categories, each in one flag at most; a restricted
gRPC call without the header and value is UNAVAILABLE "This protocol is restricted, expecting
header 'triton-grpc-protocol-<key>'" (a stream is ended so before it reads a request), an HTTP
one 403 "This API is restricted, expecting header '<key>'". Categories Thaw has no method for
(shared memory, trace, logging) are accepted: those methods are UNIMPLEMENTED anyway.

Both front doors apply them, `thaw serve`'s and `thaw up`'s (the activator, where a cluster
puts authentication in front of the models), with the same spelling and the same answers.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "GRPC_HEADER_PREFIX",
    "Category",
    "Restriction",
    "add_restriction_arguments",
    "grpc_category",
    "parse_http_restrictions",
    "parse_restrictions",
]

GRPC_HEADER_PREFIX = "triton-grpc-protocol-"


class Category(StrEnum):
    """Triton's restricted categories (src/restricted_features.h), by their flag names."""

    HEALTH = "health"
    METADATA = "metadata"
    INFERENCE = "inference"
    SHARED_MEMORY = "shared-memory"
    MODEL_CONFIG = "model-config"
    MODEL_REPOSITORY = "model-repository"
    STATISTICS = "statistics"
    TRACE = "trace"
    LOGGING = "logging"


# gRPC method name (thawwire.grpc_service.Method's values: a Method looks up as its name) ->
# its category. Names, not the enum: this module is imported by runtime.config, before any
# fork, and must not import grpc or protobuf (runtime/process/zygote.py forks with one thread).
_GRPC_METHODS: dict[str, Category] = {
    "ServerLive": Category.HEALTH,
    "ServerReady": Category.HEALTH,
    "ModelReady": Category.HEALTH,
    "ServerMetadata": Category.METADATA,
    "ModelMetadata": Category.METADATA,
    "ModelInfer": Category.INFERENCE,
    "ModelStreamInfer": Category.INFERENCE,
    "ModelConfig": Category.MODEL_CONFIG,
    "ModelStatistics": Category.STATISTICS,
    "RepositoryIndex": Category.MODEL_REPOSITORY,
    "RepositoryModelLoad": Category.MODEL_REPOSITORY,
    "RepositoryModelUnload": Category.MODEL_REPOSITORY,
    "SystemSharedMemoryStatus": Category.SHARED_MEMORY,
    "SystemSharedMemoryRegister": Category.SHARED_MEMORY,
    "SystemSharedMemoryUnregister": Category.SHARED_MEMORY,
    "CudaSharedMemoryStatus": Category.SHARED_MEMORY,
    "CudaSharedMemoryRegister": Category.SHARED_MEMORY,
    "CudaSharedMemoryUnregister": Category.SHARED_MEMORY,
    "TraceSetting": Category.TRACE,
    "LogSettings": Category.LOGGING,
}


def grpc_category(method: str) -> Category | None:
    """The category a gRPC method belongs to (None: one Thaw answers UNIMPLEMENTED)."""
    return _GRPC_METHODS.get(method)


@dataclass(frozen=True)
class Restriction:
    """The header (its full name) and value a restricted category's calls must carry; `noun`
    names the surface in the refusal ("protocol" for gRPC, "API" for HTTP)."""

    header: str
    value: str
    noun: str = "protocol"

    def allows(self, headers: Iterable[tuple[str, Any]], *, fold_case: bool = False) -> bool:
        """Whether the call carries the header with exactly the value (`fold_case`: header
        names compared case-insensitively, as HTTP's are)."""
        want = self.header.lower() if fold_case else self.header
        return any(
            (key.lower() if fold_case else key) == want and value == self.value
            for key, value in headers
        )

    @property
    def refusal(self) -> str:
        return f"This {self.noun} is restricted, expecting header '{self.header}'"


def parse_restrictions(
    values: Sequence[str],
    *,
    flag: str = "grpc-restricted-protocol",
    prefix: str = GRPC_HEADER_PREFIX,
    kind: str = "protocol",
) -> dict[Category, Restriction]:
    """Each `<categories>:<key>=<value>` value of `--flag`; ValueError in Triton's words for a
    value not of that form, an unknown category, or one named twice."""
    restrictions: dict[Category, Restriction] = {}
    for text in values:
        names, colon, setting = text.partition(":")
        key, equals, value = setting.partition("=")
        if not (colon and equals and names and key and value):
            raise ValueError(
                f"--{flag} option format is '<config name>:<setting>=<value>'. Got {text}"
            )
        for name in names.split(","):
            try:
                category = Category(name)
            except ValueError:
                raise ValueError(f"unknown restricted {kind} '{name}'") from None
            if category in restrictions:
                raise ValueError(
                    f"restricted {kind} '{name}' can not be specified in multiple config groups"
                )
            noun = "API" if kind == "api" else kind
            restrictions[category] = Restriction(prefix + key, value, noun)
    return restrictions


def add_restriction_arguments(group: argparse._ActionsContainer) -> None:
    """`--grpc-restricted-protocol` and `--http-restricted-api` (repeatable), spelt as
    tritonserver spells them: one definition for `thaw serve` and `thaw up`."""
    group.add_argument(
        "--grpc-restricted-protocol", action="append", default=[],
        metavar="PROTOCOLS:KEY=VALUE",
        help="gRPC methods of these categories (health, metadata, inference, model-config, "
        "model-repository, statistics, ...) need the header triton-grpc-protocol-KEY: VALUE "
        "(repeatable)",
    )  # fmt: skip
    group.add_argument(
        "--http-restricted-api", action="append", default=[], metavar="APIS:KEY=VALUE",
        help="HTTP endpoints of these categories (as --grpc-restricted-protocol's) need the "
        "header KEY: VALUE (repeatable)",
    )  # fmt: skip


def parse_http_restrictions(values: Sequence[str]) -> dict[Category, Restriction]:
    """`--http-restricted-api` values: the header is the key itself, the texts say "api"."""
    return parse_restrictions(values, flag="http-restricted-api", prefix="", kind="api")
