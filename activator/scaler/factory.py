"""`open_backend`: the scaler backend that `thaw up --scaler` chose, built from its config."""

from __future__ import annotations

import aiohttp

from activator.config import ActivatorConfig, BoundAddresses
from activator.observe.metrics import Metrics
from activator.scaler.backend import ScalerBackend
from activator.scaler.kube_config import KubernetesConfig

__all__ = ["open_backend"]


def open_backend(
    config: ActivatorConfig,
    session: aiohttp.ClientSession,
    metrics: Metrics,
    bound: BoundAddresses | None = None,
) -> ScalerBackend:
    """The backend `config.scaler` describes (its type says which), sharing `session`; a
    local one's replicas reach this `thaw up` at `bound` (the Kubernetes one has no use for it).

    Backends with heavy or optional dependencies are imported here, lazily, only when chosen
    (the Kubernetes one needs the `kubernetes` extra: kubernetes-asyncio).
    """
    if isinstance(config.scaler, KubernetesConfig):
        from activator.scaler.kubernetes.backend import KubernetesBackend

        return KubernetesBackend(
            config.scaler,
            session,
            metrics,
            drain_timeout_s=config.drain_timeout_s,
            shared=config.scaler.shared,
        )
    from activator.scaler.local.backend import LocalBackend

    return LocalBackend(config, config.scaler, session, bound, metrics)
