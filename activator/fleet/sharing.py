"""Which models share replicas (`thaw.placement` shared, or with `--rate-limit` a rate-limiter
resource named in common), handed to a backend that can share.

Also what the fleet's cost view and status document read of sharing: how many models each
shared replica holds, a model's running replicas counted 1/k on a replica shared by k models,
and the shared section of the status document.

Each shared model is registered with the backend (activator.scaler.backend.SharedPlacement)
with what it costs (its weights: the files of its served versions, which its image lays out
as they are) and two hooks into its endpoint: its activity now, read before evicting it, and
its scale to zero, which is how an eviction drains it without cutting a request.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

from activator.config import Placement
from activator.endpoint.model_endpoint import ModelEndpoint
from activator.fleet.repository import ModelEntry
from activator.observe.shared_report import SharedReport
from activator.scaler.backend import ScalerBackend, SharedPlacement

__all__ = [
    "models_per_shared_replica",
    "running_share",
    "share_models",
    "shared_report",
    "weights_bytes",
]

logger = logging.getLogger(__name__)


def weights_bytes(entry: ModelEntry) -> int:
    """The bytes of the model's served versions' files (its image's weights, within the
    image layout's alignment); 0 for an ensemble, which has none."""
    total = 0
    for version in entry.versions:
        total += _tree_bytes(entry.directory / version)
    return total


def _tree_bytes(root: Path) -> int:
    total = 0
    try:
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_size
    except OSError as exc:  # a version directory that vanished: the wake-up will say so
        logger.warning("cannot size %s: %s", root, exc)
    return total


def share_models(
    models: Iterable[tuple[ModelEntry, ModelEndpoint]],
    backend: ScalerBackend,
    contended: Mapping[str, frozenset[str]] | None = None,
) -> list[str]:
    """Register every shared model with `backend`; returns the shared models it cannot share
    (a backend without shared placement: they keep replicas of their own, with a warning).

    `contended` (thawserver.rate_limit_resources.contended, with `--rate-limit`): the models
    naming a rate-limiter resource that another model names, with the names. Each shares
    replicas whatever its `thaw.placement`, placed beside the others, so that one replica's
    rate limiter counts them all as one tritonserver's would."""
    contended = contended or {}
    refused: list[str] = []
    for entry, endpoint in models:
        resources = contended.get(entry.name, frozenset())
        if entry.settings.placement is not Placement.SHARED and not resources:
            continue
        if not isinstance(backend, SharedPlacement):
            refused.append(entry.name)
            continue
        if resources and entry.settings.placement is not Placement.SHARED:
            logger.info(
                "model=%s shares replicas with the models naming its rate-limiter resources "
                "(%s), so one rate limiter counts them", entry.name, ", ".join(sorted(resources)),
            )  # fmt: skip
        backend.share(
            entry.name,
            image_bytes=weights_bytes(entry),
            activity=endpoint.activity,
            evict=endpoint.scale_to_zero,
            resources=resources,
        )
    if refused:
        logger.warning(
            "`thaw.placement` shared is not supported by this scaler; dedicated replicas for: %s",
            ", ".join(refused),
        )
    return refused


def models_per_shared_replica(backend: ScalerBackend) -> dict[str, int]:
    """Shared replica id -> how many models it holds now (none without sharing)."""
    if not isinstance(backend, SharedPlacement):
        return {}
    return {r.id: len(r.models) for r in backend.shared_status()}


def shared_report(backend: ScalerBackend) -> SharedReport:
    """The shared replicas and what shared placement did to each model (empty when the
    backend does not share)."""
    if not isinstance(backend, SharedPlacement):
        return SharedReport()
    return SharedReport(backend.shared_status(), backend.shared_counts())


def running_share(endpoint: ModelEndpoint, sharing: Mapping[str, int]) -> float:
    """The model's running replicas for the cost view: a replica shared by k models counts
    1/k (its replica-seconds are shared out among them), any other one 1."""
    live = [r for r in endpoint.replicas if not r.dead]
    if not sharing:
        return float(endpoint.running_count)
    share = float(endpoint.running_count - len(live))  # starts in progress count whole
    for replica in live:
        host = replica.handle.host
        share += 1.0 / max(1, sharing.get(host, 1)) if host is not None else 1.0
    return share
