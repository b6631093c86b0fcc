"""tritonserver's `--grpc-restricted-protocol=<protocols>:<key>=<value>`: the gRPC methods a
client may call only with the header `triton-grpc-protocol-<key>: <value>`.

As Triton 2.51 (src/command_line_parser.cc ParseRestrictedFeatureOption, src/grpc/): the
protocols are Triton's category names, each in one flag at most; a call of a restricted method
without the header and value is UNAVAILABLE "This protocol is restricted, expecting header
'triton-grpc-protocol-<key>'", and a stream is ended so before it reads a request. Categories
Thaw has no method for (shared memory, trace, logging) are accepted: those methods are
UNIMPLEMENTED anyway.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from thawwire.grpc_service import Method

__all__ = [
    "GRPC_HEADER_PREFIX",
    "Category",
    "Restriction",
    "grpc_category",
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


_GRPC_METHODS: dict[Method, Category] = {
    Method.SERVER_LIVE: Category.HEALTH,
    Method.SERVER_READY: Category.HEALTH,
    Method.MODEL_READY: Category.HEALTH,
    Method.SERVER_METADATA: Category.METADATA,
    Method.MODEL_METADATA: Category.METADATA,
    Method.MODEL_INFER: Category.INFERENCE,
    Method.MODEL_STREAM_INFER: Category.INFERENCE,
    Method.MODEL_CONFIG: Category.MODEL_CONFIG,
    Method.MODEL_STATISTICS: Category.STATISTICS,
    Method.REPOSITORY_INDEX: Category.MODEL_REPOSITORY,
    Method.REPOSITORY_MODEL_LOAD: Category.MODEL_REPOSITORY,
    Method.REPOSITORY_MODEL_UNLOAD: Category.MODEL_REPOSITORY,
}


def grpc_category(method: Method) -> Category | None:
    """The category a gRPC method belongs to (None: one Thaw answers UNIMPLEMENTED)."""
    return _GRPC_METHODS.get(method)


@dataclass(frozen=True)
class Restriction:
    """The header (its full name) and value a restricted category's calls must carry."""

    header: str
    value: str

    def allows(self, metadata: Iterable[tuple[str, Any]]) -> bool:
        """Whether the call's metadata carries the header with exactly the value."""
        return any(key == self.header and value == self.value for key, value in metadata)

    @property
    def refusal(self) -> str:
        return f"This protocol is restricted, expecting header '{self.header}'"


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
            restrictions[category] = Restriction(prefix + key, value)
    return restrictions
