"""The status document's `shared` section: which models live on which shared replica, each
replica's budget and use, and what shared placement did to each model (evictions, and loads by
where the weights came from). Parsed back by `thaw status` as strictly as the rest:

    "shared": {"replicas": [{"id", "url", "budget_bytes", "used_bytes", "models", "pid"}],
               "models": {model: {"evictions", "loads": {source: count}}}}

Absent from a document (a `thaw up` without shared placement), it parses as empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from activator.scaler.backend import SharedCounts, SharedReplicaStatus

__all__ = ["SharedReport"]


@dataclass(frozen=True)
class SharedReport:
    """The shared replicas now (by id) and each shared model's counts (by name)."""

    replicas: tuple[SharedReplicaStatus, ...] = ()
    models: Mapping[str, SharedCounts] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "replicas": [
                {
                    "id": r.id,
                    "url": r.url,
                    "budget_bytes": r.budget_bytes,
                    "used_bytes": r.used_bytes,
                    "models": list(r.models),
                    "pid": r.pid,
                }
                for r in self.replicas
            ],
            "models": {
                name: {"evictions": c.evictions, "loads": dict(c.loads)}
                for name, c in self.models.items()
            },
        }

    @classmethod
    def from_json(cls, value: object) -> SharedReport:
        """Parse the section (None: absent); ValueError naming what does not fit."""
        if value is None:
            return cls()
        doc = _object(value, "shared")
        replicas = doc.get("replicas", [])
        models = _object(doc.get("models", {}), "shared.models")
        if not isinstance(replicas, list):
            raise ValueError("shared: 'replicas' must be a JSON array")
        return cls(
            tuple(_replica(r, f"shared.replicas[{i}]") for i, r in enumerate(replicas)),
            {str(name): _counts(c, f"shared.models.{name}") for name, c in models.items()},
        )


def _object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a JSON object")
    return value


def _count(value: object, what: str, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{where}: '{what}' must be a non-negative integer, not {value!r:.60}")
    return value


def _replica(value: object, where: str) -> SharedReplicaStatus:
    doc = _object(value, where)
    for key in ("id", "url"):
        if not isinstance(doc.get(key), str):
            raise ValueError(f"{where}: '{key}' must be a string")
    models = doc.get("models", [])
    if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
        raise ValueError(f"{where}: 'models' must be an array of strings")
    pid = doc.get("pid")
    return SharedReplicaStatus(
        id=doc["id"],
        url=doc["url"],
        budget_bytes=_count(doc.get("budget_bytes"), "budget_bytes", where),
        used_bytes=_count(doc.get("used_bytes"), "used_bytes", where),
        models=tuple(models),
        pid=None if pid is None else _count(pid, "pid", where),
    )


def _counts(value: object, where: str) -> SharedCounts:
    doc = _object(value, where)
    loads = _object(doc.get("loads", {}), f"{where}.loads")
    return SharedCounts(
        evictions=_count(doc.get("evictions"), "evictions", where),
        loads={str(k): _count(v, k, f"{where}.loads") for k, v in loads.items()},
    )
