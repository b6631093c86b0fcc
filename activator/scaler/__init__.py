"""Scaler backends: where replicas run (local processes, or pods of a Kubernetes cluster).

`backend` is the seam (the ScalerBackend Protocol, ReplicaHandle, PoolStatus);
`runtime_control` the HTTP control client every backend uses to bring a runtime up;
`local_backend` + `local_config` + `launcher` + `replica_process` the local backend;
`kubernetes_backend` + `pod_starter` + `pod_informer` + `leader_election` the Kubernetes one;
`factory.open_backend` builds the one `--scaler` chose.
"""

from __future__ import annotations

from activator.scaler.backend import (
    PoolReport,
    PoolStatus,
    ReplicaHandle,
    ScalerBackend,
    ScalerKind,
)

__all__ = ["PoolReport", "PoolStatus", "ReplicaHandle", "ScalerBackend", "ScalerKind"]
