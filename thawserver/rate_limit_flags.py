"""tritonserver's rate-limiter flags, for both CLIs: `--rate-limit` and `--rate-limit-resource`,
their grammar and Triton's refusals (`thaw serve` enforces them, runtime.scheduling; `thaw up`
gives them to every replica it starts).

    parse_mode("execution_count")  -> RateLimitMode.EXECUTION_COUNT
    parse_resource("R1:10")        -> ExplicitResource("R1", 10, device=None)   all devices
    parse_resource("R1:10:0")      -> ExplicitResource("R1", 10, device=0)
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "ExplicitResource",
    "RateLimitMode",
    "add_rate_limit_arguments",
    "parse_mode",
    "parse_resource",
]


class RateLimitMode(StrEnum):
    OFF = "off"
    EXECUTION_COUNT = "execution_count"


@dataclass(frozen=True)
class ExplicitResource:
    """One `--rate-limit-resource=<name>:<count>[:<device>]`; device None: every device."""

    name: str
    count: int
    device: int | None = None


def parse_mode(text: str) -> RateLimitMode:
    """`--rate-limit`'s value; ValueError in Triton's words for any other."""
    try:
        return RateLimitMode(text)
    except ValueError:
        raise ValueError(f"Invalid rate limit mode: {text}") from None


def parse_resource(text: str) -> ExplicitResource:
    """`--rate-limit-resource`'s value; ValueError in Triton's words for a malformed one."""
    parts = text.split(":")
    usage = (
        "--rate-limit-resource option format is '<resource_name>:<count>:<device>' or "
        f"'<resource_name>:<count>'. Got {text}"
    )
    if len(parts) not in (2, 3) or not parts[0]:
        raise ValueError(usage)
    try:
        count = int(parts[1])
        device = int(parts[2]) if len(parts) == 3 else None
    except ValueError:
        raise ValueError(usage) from None
    if count < 0 or (device is not None and device < 0):
        raise ValueError(usage)
    return ExplicitResource(parts[0], count, device)


def add_rate_limit_arguments(group: argparse._ActionsContainer, *, replicas: bool = False) -> None:
    """The two flags; `replicas`: `thaw up`'s help (it gives them to every replica)."""
    where = ""
    if replicas:
        where = (
            " (given to every replica; models naming a resource in common share their "
            "replicas, so that one limiter counts them all)"
        )
    kwargs: dict[str, Any] = {"metavar": "MODE", "default": "off"}
    group.add_argument(
        "--rate-limit", **kwargs,
        help="off (default) or execution_count: Triton's rate limiter; an instance executes "
        "only while it holds its rate_limiter resources, waiting instances served by their "
        f"group's priority{where}",
    )  # fmt: skip
    group.add_argument(
        "--rate-limit-resource", action="append", default=[],
        metavar="<name>:<count>[:<device>]",
        help="the count of a rate-limiter resource (repeatable); a model whose instances need "
        f"more is refused{where}",
    )  # fmt: skip
