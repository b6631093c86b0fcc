"""The status document of a running `thaw up` (`GET /thaw/status`, read by `thaw status`).

One definition for both ends: the fleet builds a `StatusDocument`, the route serves its
`to_json()`, and `thaw status` parses the answer back with `StatusDocument.from_json`, which
refuses anything of another shape. JSON keys are the field names, in field order:

    {"models": [{"model", "state", "replicas_ready", "replicas_desired", "replicas_starting",
                 "held_requests", "in_flight", "direct_connections", "last_cold_start_s",
                 "last_error", "replicas": [{"id", "url", "pid", "in_flight",
                 "direct_connections", "direct_in_flight", "state"}]}],
     "warm_pool": {"size", "ready", "starting", "source", "idle_pss_bytes", "server_pss_bytes",
                   "budget_bytes", "demand", "limit", "last_start_s", "starts", "failures"},
     "image_builds": {model: an activator.image_builder.ImageState, or "failed: <why>"}}

`warm_pool` keys after `ready` are optional when parsing (a backend without a measured pool
reports only its size).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from activator.scaler.backend import PoolStatus

__all__ = ["ModelState", "ModelStatus", "ReplicaState", "ReplicaStatus", "StatusDocument"]


class ModelState(StrEnum):
    COLD = "cold"  # no replica, none starting
    WAKING = "waking"  # a replica is starting, none ready
    WARM = "warm"  # at least one replica routable
    DRAINING = "draining"  # only replicas on their way out
    UNAVAILABLE = "unavailable"  # its config.pbtxt could not be used (last_error says why)


class ReplicaState(StrEnum):
    READY = "ready"  # routable
    DRAINING = "draining"  # no new requests; in-flight ones finish, then it stops
    DEAD = "dead"  # lost; leaving the model


@dataclass(frozen=True)
class ReplicaStatus:
    """One replica: where it is, requests in flight through the activator, direct load."""

    id: str
    url: str
    pid: int | None
    in_flight: int
    direct_connections: int
    direct_in_flight: int
    state: ReplicaState


@dataclass(frozen=True)
class ModelStatus:
    """One model: its state, replicas ready/desired/starting, held and in-flight requests,
    open direct connections, its last cold start (seconds) and last error."""

    model: str
    state: ModelState
    replicas_ready: int
    replicas_desired: int
    replicas_starting: int
    held_requests: int
    in_flight: int
    direct_connections: int
    last_cold_start_s: float | None
    last_error: str | None
    replicas: tuple[ReplicaStatus, ...] = ()

    @classmethod
    def unavailable(cls, model: str, reason: str) -> ModelStatus:
        """A repository model `thaw up` cannot serve (its config was refused: `reason`)."""
        return cls(model, ModelState.UNAVAILABLE, 0, 0, 0, 0, 0, 0, None, reason)


@dataclass(frozen=True)
class StatusDocument:
    """Every model (sorted by name), the scaler's warm pool, and the start-up image builds."""

    models: tuple[ModelStatus, ...]
    warm_pool: PoolStatus
    image_builds: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The document as JSON-ready dicts and lists."""
        return {
            "models": [_json_of(m) for m in self.models],
            "warm_pool": {
                **dataclasses.asdict(self.warm_pool),
                "idle_pss_bytes": list(self.warm_pool.idle_pss_bytes),
            },
            "image_builds": dict(self.image_builds),
        }

    @classmethod
    def from_json(cls, doc: object) -> StatusDocument:
        """Parse an answer of `GET /thaw/status`; ValueError naming what does not fit."""
        top = _object(doc, "the document")
        models = tuple(_model(m, f"models[{i}]") for i, m in enumerate(_list(top, "models")))
        pool = _object(top.get("warm_pool"), "warm_pool")
        builds = _object(top.get("image_builds"), "image_builds")
        if not all(isinstance(v, str) for v in builds.values()):
            raise ValueError("image_builds: every value must be a string")
        return cls(models=models, warm_pool=_pool(pool), image_builds=builds)


def _json_of(model: ModelStatus) -> dict[str, Any]:
    doc = dataclasses.asdict(model)
    doc["replicas"] = list(doc["replicas"])
    return doc


def _object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a JSON object")
    return value


def _list(doc: dict[str, Any], key: str, where: str = "") -> list[Any]:
    value = doc.get(key)
    if not isinstance(value, list):
        raise ValueError(
            f"{where}: '{key}' must be a JSON array" if where else f"'{key}' must be a JSON array"
        )
    return value


def _wrong(doc: dict[str, Any], key: str, what: str, where: str) -> ValueError:
    shown = repr(doc[key])[:60] if key in doc else "missing"
    return ValueError(f"{where}: '{key}' must be {what}, not {shown}")


def _int(doc: dict[str, Any], key: str, where: str) -> int:
    value = doc.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise _wrong(doc, key, "an integer", where)
    return value


def _str(doc: dict[str, Any], key: str, where: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str):
        raise _wrong(doc, key, "a string", where)
    return value


def _maybe(doc: dict[str, Any], key: str, kind: type, where: str) -> Any:
    """A nullable field (present, possibly null); ints are accepted as floats."""
    value = doc.get(key, ...)
    if value is None:
        return None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise _wrong(doc, key, f"{kind.__name__} or null", where)
    return value


def _pool(doc: dict[str, Any]) -> PoolStatus:
    where = "warm_pool"
    pss = doc.get("idle_pss_bytes", [])
    if not isinstance(pss, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in pss
    ):
        raise ValueError("warm_pool: 'idle_pss_bytes' must be an array of integers")
    optional = {k: doc.get(k) for k in ("server_pss_bytes", "budget_bytes", "last_start_s")}
    return PoolStatus(
        size=_int(doc, "size", where),
        ready=_int(doc, "ready", where),
        starting=_int(doc, "starting", where) if "starting" in doc else 0,
        source=_str(doc, "source", where) if "source" in doc else "",
        idle_pss_bytes=tuple(pss),
        server_pss_bytes=_maybe(optional, "server_pss_bytes", int, where),
        budget_bytes=_maybe(optional, "budget_bytes", int, where),
        demand=_int(doc, "demand", where) if "demand" in doc else 0,
        limit=_str(doc, "limit", where) if "limit" in doc else "",
        last_start_s=_maybe(optional, "last_start_s", float, where),
        starts=_int(doc, "starts", where) if "starts" in doc else 0,
        failures=_int(doc, "failures", where) if "failures" in doc else 0,
    )


def _model(value: object, where: str) -> ModelStatus:
    doc = _object(value, where)
    return ModelStatus(
        model=_str(doc, "model", where),
        state=_enum(ModelState, _str(doc, "state", where), where),
        replicas_ready=_int(doc, "replicas_ready", where),
        replicas_desired=_int(doc, "replicas_desired", where),
        replicas_starting=_int(doc, "replicas_starting", where),
        held_requests=_int(doc, "held_requests", where),
        in_flight=_int(doc, "in_flight", where),
        direct_connections=_int(doc, "direct_connections", where),
        last_cold_start_s=_maybe(doc, "last_cold_start_s", float, where),
        last_error=_maybe(doc, "last_error", str, where),
        replicas=tuple(
            _replica(r, f"{where}.replicas[{i}]")
            for i, r in enumerate(_list(doc, "replicas", where))
        ),
    )


def _replica(value: object, where: str) -> ReplicaStatus:
    doc = _object(value, where)
    return ReplicaStatus(
        id=_str(doc, "id", where),
        url=_str(doc, "url", where),
        pid=_maybe(doc, "pid", int, where),
        in_flight=_int(doc, "in_flight", where),
        direct_connections=_int(doc, "direct_connections", where),
        direct_in_flight=_int(doc, "direct_in_flight", where),
        state=_enum(ReplicaState, _str(doc, "state", where), where),
    )


E = TypeVar("E", bound=StrEnum)


def _enum(kind: type[E], value: str, where: str) -> E:
    try:
        return kind(value)
    except ValueError:
        known = ", ".join(m.value for m in kind)
        raise ValueError(f"{where}: state {value[:40]!r} is not one of {known}") from None
