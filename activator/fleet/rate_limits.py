"""What `thaw up --rate-limit=execution_count` (local scaler) asks of the fleet, from the served
models' configs (pure): which models share replicas, being those naming a rate-limiter
resource in common, so one replica's limiter counts them all (decision 0029); and whether a
model loaded or polled in after the start may load beside the served ones, as at start
(thawserver.rate_limit_resources)."""

from __future__ import annotations

from collections.abc import Mapping

from activator.fleet.repository import ModelEntry
from activator.scaler.kube_config import KubernetesConfig
from activator.scaler.local_config import LocalConfig
from thawserver.rate_limit_resources import contended, group_devices, load_refusal, requirements

__all__ = ["load_problem", "sharing"]


def _limited(scaler: LocalConfig | KubernetesConfig) -> LocalConfig | None:
    return scaler if isinstance(scaler, LocalConfig) and scaler.rate_limited else None


def sharing(
    scaler: LocalConfig | KubernetesConfig, entries: Mapping[str, ModelEntry]
) -> dict[str, frozenset[str]]:
    """The models of `entries` naming a rate-limiter resource that another names, with the
    names (they share replicas); none when the rate limiter is off."""
    if _limited(scaler) is None:
        return {}
    return contended({name: entry.config for name, entry in entries.items()})


def load_problem(
    scaler: LocalConfig | KubernetesConfig, entry: ModelEntry, entries: Mapping[str, ModelEntry]
) -> str | None:
    """Triton's refusal of a load of `entry` beside the served `entries` (itself left out): a
    resource global in one and per device in the other, or a `--rate-limit-resource` count
    below its need; None when it may load or the rate limiter is off."""
    limited = _limited(scaler)
    if limited is None:
        return None
    others = [
        requirements(other.config, group_devices(other.config))
        for name, other in entries.items()
        if name != entry.name
    ]
    needs = requirements(entry.config, group_devices(entry.config))
    return load_refusal(needs, others, limited.rate_limit_resources)
