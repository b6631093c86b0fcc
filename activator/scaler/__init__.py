"""Scaler backends: where replicas run (local processes, or pods of a Kubernetes cluster).

The seam modules sit at this package's root, below `activator.observe` and `activator.direct`,
so that `activator.config` can hold the backends' configs; the two backends are subpackages that
never import each other (import-linter contracts), and `factory` builds the one chosen.

    backend          the seam: the ScalerBackend Protocol, ReplicaHandle, PoolStatus
    runtime_control  the HTTP control calls every backend makes to a runtime
    placement        where a shared model's replica goes, what is evicted: pure, clock-injected
    launcher         the command line that starts a local `thaw serve` runtime
    local_config     LocalConfig: the local backend's settings
    kube_config      KubernetesConfig: the Kubernetes backend's settings
    shared_settings  SharedSettings: shared placement's budgets and graces (both backends)
    factory          `open_backend`: the backend `thaw up --scaler` chose
    local/           the local backend: `thaw serve` processes and a warm pool
    kubernetes/      the Kubernetes backend: runtime pods, leader election

Exports the seam's `ScalerBackend`, `ReplicaHandle`, `PoolReport`, `PoolStatus`, `ScalerKind`,
and `open_backend`, each imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from activator.scaler.backend import (
        PoolReport,
        PoolStatus,
        ReplicaHandle,
        ScalerBackend,
        ScalerKind,
    )
    from activator.scaler.factory import open_backend

__all__ = [
    "PoolReport",
    "PoolStatus",
    "ReplicaHandle",
    "ScalerBackend",
    "ScalerKind",
    "open_backend",
]

# Each export and the module that defines it, imported on first use (PEP 562), so that importing
# one module of this package does not import the others.
_EXPORTS = {
    "PoolReport": "activator.scaler.backend",
    "PoolStatus": "activator.scaler.backend",
    "ReplicaHandle": "activator.scaler.backend",
    "ScalerBackend": "activator.scaler.backend",
    "ScalerKind": "activator.scaler.backend",
    "open_backend": "activator.scaler.factory",
}


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
