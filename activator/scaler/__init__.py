"""Scaler backends: where replicas run (local processes now; Kubernetes plugs in later)."""

from __future__ import annotations

from activator.scaler.backend import ScalerBackend, StartedReplica

__all__ = ["ScalerBackend", "StartedReplica"]
