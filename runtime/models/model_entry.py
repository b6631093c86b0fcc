"""One model the ModelManager has seen: its state, what serves, and its repository-index rows."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from runtime.models.load_errors import index_reason
from runtime.models.namespaces import ModelKey
from runtime.models.version_loader import LoadedVersion
from runtime.models.version_reuse import Fingerprint
from tritonconfig.schema import mc

__all__ = ["UNLOADED", "ModelEntry", "ModelState", "index_rows"]

# The reason a model unloaded on request is UNAVAILABLE for (the index shows it, as Triton's).
UNLOADED = "unloaded"


class ModelState(StrEnum):
    """Where a model is in its life; the index reports these strings."""

    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"
    LOADING = "LOADING"
    UNLOADING = "UNLOADING"


@dataclass
class ModelEntry:
    """One model the manager has seen; `versions` holds what currently serves."""

    name: str
    key: ModelKey  # the name in its namespace (runtime.models.namespaces)
    state: ModelState | None = None  # None: never asked to load
    reason: str = ""
    versions: dict[str, LoadedVersion] = field(default_factory=dict)
    latest: str = ""  # the version unversioned requests go to
    known_versions: list[str] = field(default_factory=list)  # last versions loaded or tried
    # Versions a later load left out (a new version under `latest`, a load's `file:`s): each
    # keeps its index row, UNAVAILABLE "unloaded", as in Triton's index.
    retired_versions: set[str] = field(default_factory=set)
    wanted: bool = False  # should be loaded (counts for server readiness)
    fingerprint: tuple[tuple[str, int, int], ...] = ()
    override_dir: Path | None = None  # temp repository for a load with `files`
    config_override: bool = False  # serving a load's `config`, read from the repository
    # What the versions up were loaded from: a reload keeps the unchanged (version_reuse)
    served_fingerprint: Fingerprint = ()
    served_config: mc.ModelConfig | None = None
    # An ensemble an unload of one of its steps took down (explicit mode): the models its
    # steps ran then. It is loaded again once they all are, as Triton brings it back
    # (tritonconfig.back_with_steps); None for every other model, and once it is loaded again
    # or unloaded by name.
    down_with_steps: frozenset[ModelKey] | None = None
    # Loaded by name (a load call, `--load-model`), as Triton's "explicitly loaded": an unload
    # with `unload_dependents` of an ensemble that runs it leaves it loaded. Until an unload
    # takes it out of the graph (not one that takes it down with a step).
    named: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def live(self) -> bool:
        """Serving, or to be (a request for its name may mean it: runtime.models.namespaces)."""
        return bool(self.versions) or self.wanted


def index_rows(name: str, model: ModelEntry | None) -> list[dict[str, Any]]:
    """Triton's repository-index rows of one model (observed on 2.51): the name alone for a
    model never asked to load; else a version on every row of a model it tried to load, and
    `reason` only when there is one; a version a later load left out stays, "unloaded";
    rows in version order."""
    if model is None or model.state is None:
        return [{"name": name}]
    current = list(model.versions) or model.known_versions or [""]
    retired = sorted(model.retired_versions - set(current), key=int)
    rows = []
    for version in sorted([*current, *retired], key=lambda v: int(v) if v else -1):
        row: dict[str, Any] = {"name": name}
        if version:
            row["version"] = version
        if version in retired:
            row["state"], row["reason"] = ModelState.UNAVAILABLE.value, UNLOADED
        else:
            row["state"] = model.state.value
            if model.reason:
                row["reason"] = index_reason(name, model.reason)
        rows.append(row)
    return rows
