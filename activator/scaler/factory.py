"""`open_backend`: the scaler backend that `thaw up --scaler` chose, built from its config."""

from __future__ import annotations

import aiohttp

from activator.config import ActivatorConfig
from activator.scaler.backend import ScalerBackend
from activator.scaler.local_backend import LocalBackend

__all__ = ["open_backend"]


def open_backend(config: ActivatorConfig, session: aiohttp.ClientSession) -> ScalerBackend:
    """The backend `config.scaler` describes (its type says which), sharing `session`.

    Backends with heavy or optional dependencies are imported here, lazily, only when chosen.
    """
    return LocalBackend(config, config.scaler, session)
