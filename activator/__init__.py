"""The activator: `thaw up`, Thaw's front door, autoscaler and scaler (the platform process).

It talks to runtimes over HTTP and a handoff socket and imports no runtime code (an
import-linter contract). Subpackages from the top layer down (each imports only those below it),
then the root modules every layer reads:

    process/        the processes and commands: `thaw up`, `thaw status`, `thaw prefetch`
    surfaces/       what clients reach: the v2 REST app and proxy, gRPC, the status page
    fleet/          every model of one `thaw up`: the repository, settings, images
    endpoint/       one model: admission, held queue, breaker, replicas, autoscaler
    scaler/         where replicas run: the seam, then `local/` and `kubernetes/` backends
    direct/         the front door that hands client connections to warm replicas
    observe/        metrics, the status document, history, cost
    config          ActivatorConfig and per-model ScaleSettings, built once and validated
    errors          the error tree; every error that reaches a client carries its status

Exports `ActivatorConfig`, `ScaleSettings`, `ActivatorError`, `Autoscaler`, `Decision`,
`ReplicaHandle` and `ScalerBackend`, each imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from activator.config import ActivatorConfig, ScaleSettings
    from activator.endpoint.autoscaler import Autoscaler, Decision
    from activator.errors import ActivatorError
    from activator.scaler.backend import ReplicaHandle, ScalerBackend

__all__ = [
    "ActivatorConfig",
    "ActivatorError",
    "Autoscaler",
    "Decision",
    "ReplicaHandle",
    "ScaleSettings",
    "ScalerBackend",
]

# Each export and the module that defines it, imported on first use (PEP 562), so that importing
# one module of this package does not import the others.
_EXPORTS = {
    "ActivatorConfig": "activator.config",
    "ActivatorError": "activator.errors",
    "Autoscaler": "activator.endpoint.autoscaler",
    "Decision": "activator.endpoint.autoscaler",
    "ReplicaHandle": "activator.scaler.backend",
    "ScaleSettings": "activator.config",
    "ScalerBackend": "activator.scaler.backend",
}


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
