"""The models a runtime serves: the ModelManager service both surfaces call, and loading.

    service           the ModelService Protocol: what the surfaces (REST, gRPC) call
    manager           ModelManager: model states, control modes, load/unload, infer
    views             what the manager serves by reading its models: index, metadata,
                      config, statistics, the versions serving (its base class)
    model_loading     the manager's loads, reloads, unloads and polls, a lock per model
    model_entry       one model the manager has seen: its state, versions, index rows
    version_loader    bring a model's versions up in a thread: plan, restore, instances
    version_reuse     which loaded versions a reload keeps (unchanged files, same config)
    instance_identity  which instances an instance-group update keeps (Triton's identity)
    instance_update   an update of only the instance groups, carried out in place
    repository        the model repository on disk: names, scanning, one model's ModelSpec
    repository_file   one repository file read as hostile input: regular only, bounded
    repository_sync   the seam to remote (S3) repositories: synced before index, load, poll
    repository_spares  `--python-spare-stubs auto`, `--python-spare-stub-imports auto`: read
                      from the Python models
    namespaces        `--model-namespacing`: which model a name means in several repositories
    signature         a loaded model's inputs/outputs: request validation and reshape
    output_labels     the outputs' classification labels, read from `label_filename` at load
    load_overrides    a load request's overrides, checked: a config and model files
    load_errors       the words of a failed load request (Triton's `load failed for model`)
    load_files        a load request's model files written out as a private repository
    warmup            Triton's model warm-up: `model_warmup` samples on every instance
    snapshot_restore  restore a version's snapshot image, or say why its files load
    image_cache       the snapshot image loader, built once, and its caches' metrics
    response_cache    Triton's response cache, under one byte bound
    cache_policy      which models may use the response cache (a decoupled one may not)
    answer_order      whether a model's stream answers may leave out of request order
    lifecycle         server lifecycle: warm-up imports, manager start/stop, readiness

Exports `ModelManager`, `ModelService`, `ModelState` and `ModelSpec`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.models.manager import ModelManager
    from runtime.models.model_entry import ModelState
    from runtime.models.repository import ModelSpec
    from runtime.models.service import ModelService

__all__ = ["ModelManager", "ModelService", "ModelSpec", "ModelState"]

# Each export and the module that defines it, imported on first use (PEP 562), so that importing
# one module of this package does not import the others.
_EXPORTS = {
    "ModelManager": "runtime.models.manager",
    "ModelService": "runtime.models.service",
    "ModelSpec": "runtime.models.repository",
    "ModelState": "runtime.models.model_entry",
}


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
