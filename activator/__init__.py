"""The activator: Thaw's front door, autoscaler, local scaler and warm pool (`thaw up`)."""

from __future__ import annotations

from activator.autoscaler import Autoscaler, Decision
from activator.config import ActivatorConfig, ScaleSettings
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
