"""The `thaw up` flags of shared placement (`thaw.placement` shared models, `--scaler local`):
each shared replica's budget, a model's overhead, and the graces of eviction and release."""

from __future__ import annotations

import argparse

from activator.errors import ConfigError
from activator.scaler.local_config import SharedSettings
from thawserver import ranges

__all__ = ["add_shared_arguments", "shared_replica_concurrency", "shared_settings"]

_DEFAULTS = SharedSettings()


def add_shared_arguments(group: argparse._ArgumentGroup) -> None:
    """Add the shared-placement flags to the local scaler's argument group."""
    group.add_argument(
        "--shared-replica-bytes",
        type=int,
        default=_DEFAULTS.budget_bytes,
        metavar="N",
        help="memory budget of one replica shared by `thaw.placement` shared models: their "
        f"images plus --shared-model-overhead-bytes each (default {_DEFAULTS.budget_bytes >> 20}"
        " MiB; a larger model gets a replica of its own size; on Kubernetes capped by a pod's "
        "memory limit less its runtime's own memory)",
    )
    group.add_argument(
        "--shared-model-overhead-bytes",
        type=int,
        default=_DEFAULTS.model_overhead_bytes,
        metavar="N",
        help="what a loaded shared model costs besides its image (default "
        f"{_DEFAULTS.model_overhead_bytes >> 20} MiB, measured: docs/density.md)",
    )
    group.add_argument(
        "--evict-grace-s",
        type=float,
        default=_DEFAULTS.evict_grace_s,
        metavar="S",
        help="a shared model idle this long (no request, nothing in flight or held) may be "
        "evicted to make room for another (default %(default)g)",
    )
    group.add_argument(
        "--shared-replica-concurrency",
        type=int,
        default=0,
        metavar="N",
        help="in-flight requests of all models on one shared replica, at most (default 0: "
        "unlimited; each model's thaw.container_concurrency still holds)",
    )
    group.add_argument(
        "--shared-release-grace-s",
        type=float,
        default=_DEFAULTS.release_grace_s,
        metavar="S",
        help="a shared replica whose models are all at zero is stopped after this long "
        "(default %(default)g)",
    )


def shared_replica_concurrency(args: argparse.Namespace) -> int:
    """`--shared-replica-concurrency`; ConfigError when out of its range."""
    _check("--shared-replica-concurrency", args.shared_replica_concurrency, 0, 100_000)
    return int(args.shared_replica_concurrency)


def _check(flag: str, value: float, low: float, high: float) -> None:
    problem = ranges.out_of_range(flag, value, low, high)
    if problem is not None:
        raise ConfigError(problem)


def shared_settings(args: argparse.Namespace) -> SharedSettings:
    """The flags as `SharedSettings`; ConfigError naming a flag out of its range."""
    for flag, value, low, high in (
        ("--shared-replica-bytes", args.shared_replica_bytes, 1 << 20, 1 << 44),
        ("--shared-model-overhead-bytes", args.shared_model_overhead_bytes, 0, 1 << 40),
        ("--evict-grace-s", args.evict_grace_s, 0, 86_400),
        ("--shared-release-grace-s", args.shared_release_grace_s, 0, 86_400),
    ):
        _check(flag, value, low, high)
    return SharedSettings(
        budget_bytes=args.shared_replica_bytes,
        model_overhead_bytes=args.shared_model_overhead_bytes,
        evict_grace_s=args.evict_grace_s,
        release_grace_s=args.shared_release_grace_s,
    )
