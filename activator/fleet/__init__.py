"""The fleet: every model of one `thaw up`, from its repository, and their images.

    fleet           all model endpoints: their scaler backend, autoscaling tick, shutdown
    repository      the view of the model repository: names, configs, metadata, re-reads
    ensemble_checks  whether the repository's ensembles can run, in a replica's words (pure)
    rescan          what changed between two reads of the repository, when to poll (pure)
    reload          the repository read again: an explicit load, the poll
    load_state      Triton's not loaded / loaded / unloaded in explicit mode (pure)
    load_calls      the load and unload calls, as they change the fleet and its load state
    in_place        whether replicas take a changed config in place (an instance update)
    replica_updates  an instance update in place, sent to a model's replicas
    override_files  a load's `file:` overrides written out, inside thaw up's own directory
    model_settings  per-model `thaw.*` overrides from `--model-settings FILE`
    replica_config  configs only a replica can complete (`auto_complete_config`)
    image_builder   each model's snapshot image, built or pulled (start-up, and changes)
    sharing         which models share replicas, handed to the backend; the 1/k cost share
    rate_limits     with `--rate-limit`: the models sharing replicas for a resource in common,
                    and a later load judged beside the served models (pure)
    log_push        the log settings: the activator's own log, and every replica told them
    trace_push      the trace settings, told to every replica once a client changes them
    replica_push    settings posted to replicas in the background

Exports `Fleet` and `Repository`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from activator.fleet.fleet import Fleet
    from activator.fleet.repository import Repository

__all__ = ["Fleet", "Repository"]

# Each export and the module that defines it, imported on first use (PEP 562), so that importing
# one module of this package does not import the others.
_EXPORTS = {
    "Fleet": "activator.fleet.fleet",
    "Repository": "activator.fleet.repository",
}


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
