"""The status document of a running `thaw up` (`GET /thaw/status`, read by `thaw status`).

One definition for both ends: the fleet builds a `StatusDocument`, the route serves its
`to_json()`, and `thaw status` parses the answer back with `StatusDocument.from_json`, which
refuses anything of another shape. JSON keys are the field names, in field order:

    {"models": [{"model", "state", "replicas_ready", "replicas_desired", "replicas_starting",
                 "held_requests", "in_flight", "direct_connections", "last_cold_start_s",
                 "last_error", "replicas": [{"id", "url", "pid", "in_flight",
                 "direct_connections", "direct_in_flight", "state"}], "placement_class",
                 "first_token_cold_s", "first_token_warm_s", "load_state"}],
     "warm_pool": {"size", "ready", "starting", "source", "idle_pss_bytes", "server_pss_bytes",
                   "budget_bytes", "demand", "limit", "last_start_s", "starts", "failures"},
     "image_builds": {model: an ImageState value, or "failed: <why>"},
     "cold_starts": [{"model", "began_unix", "claim_s", "restore_s", "warmup_s", "total_s",
                      "error"}],                                      (newest first)
     "cost": {"gpu_hour_price", "models": [{"model", "observed_s", "replica_seconds",
              "gpus_per_replica", "idle_at_zero_s", "peak_replicas",
              "always_on_replica_seconds", + derived: "gpu_seconds", "always_on_gpu_seconds",
              "saved_replica_seconds", "saved_gpu_seconds", "spent_money", "saved_money"}]},
     "shared": {"replicas": [...], "models": {...}}}   (activator.observe.shared_report)

`warm_pool` keys after `ready` are optional when parsing (a backend without a measured pool
reports only its size). `image_builds` speaks one vocabulary, `ImageState` below, whether the
start-up step built an image or pulled it from `--store` (activator.fleet.image_builder); the status
page and `thaw status` show it as is. `cold_starts` and `cost` are the status page's and `thaw
status --cost`'s sections (activator.endpoint.cold_start, activator.observe.cost); derived cost
figures are written for other readers (the page) and recomputed, not read, by `from_json`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from activator.observe.cost import CostFigures, priced
from activator.observe.shared_report import SharedReport
from activator.scaler.backend import PoolStatus

__all__ = [
    "ColdStartReport",
    "CostReport",
    "ImageState",
    "ModelState",
    "ModelStatus",
    "ReplicaState",
    "ReplicaStatus",
    "StatusDocument",
]


class ModelState(StrEnum):
    COLD = "cold"  # no replica, none starting
    WAKING = "waking"  # a replica is starting, none ready
    WARM = "warm"  # at least one replica routable
    DRAINING = "draining"  # only replicas on their way out
    UNAVAILABLE = "unavailable"  # its config.pbtxt could not be used (last_error says why)
    WAITING_FOR_NODE = "waiting for a node"  # starting, none ready: its pod awaits a new node


class ImageState(StrEnum):
    """Where a model's snapshot image stands at this `thaw up` (`image_builds`); a failure is
    `failed: <reason>` (the build or pull failed, timed out, could not start, or the store
    could not be listed): the model then loads from its files."""

    QUEUED = "queued"  # its build or pull has not begun
    BUILDING = "building"  # `thaw snapshot build` into the cache is running
    BUILT = "built"  # built into the cache at this start-up
    PULLING = "pulling"  # copying from `--store` into the cache
    CACHED = "cached"  # pulled from the store into the cache
    NOT_IN_STORE = "not in store"  # the store has none: the model loads from its files
    STALE = "stale in store"  # the store's image was built from other files: it loads files
    NO_WEIGHTS = "no weights"  # nothing to image (a Python model, an ensemble): loads normally
    FAILED = "failed"  # only as the prefix of "failed: <reason>"
    UNKNOWN = "unknown"  # no image step ran (`--no-image-build`, no cache, Kubernetes)


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
    open direct connections, its last cold start (seconds) and last error; on Kubernetes,
    the placement class whose pool its pods come from; for a model served through the OpenAI
    API, the time to first token of its last request that found it at zero (`cold`) and of
    its last one that found a replica ready (`warm`); in explicit model control, its load
    state. The last four are optional when parsing."""

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
    placement_class: str | None = None
    first_token_cold_s: float | None = None
    first_token_warm_s: float | None = None
    # Explicit model control's "not loaded" / "loaded" / "unloaded" (activator.fleet.
    # load_state); None where models have no load state (other modes, Kubernetes).
    load_state: str | None = None

    @classmethod
    def unavailable(cls, model: str, reason: str) -> ModelStatus:
        """A repository model `thaw up` cannot serve (its config was refused: `reason`)."""
        return cls(model, ModelState.UNAVAILABLE, 0, 0, 0, 0, 0, 0, None, reason)


@dataclass(frozen=True)
class ColdStartReport:
    """One cold start of `model`: when it began (Unix seconds) and its phases in seconds —
    claim (a running runtime: warm-pool claim or fresh start), restore (the load call: image
    restore or the model's normal load), warm-up (ready to first response) and total. A
    failed one has no `total_s` and says why in `error` (phases it did not reach are null)."""

    model: str
    began_unix: float
    claim_s: float | None
    restore_s: float | None
    warmup_s: float | None
    total_s: float | None
    error: str | None = None


@dataclass(frozen=True)
class CostReport:
    """Per model, replica- and GPU-seconds used vs always-on at the observed peak
    (activator.observe.cost); `gpu_hour_price` (`thaw up --gpu-hour-price`) makes money figures."""

    gpu_hour_price: float | None = None
    models: tuple[CostFigures, ...] = ()

    def to_json(self) -> dict[str, Any]:
        price = self.gpu_hour_price
        rows = []
        for c in self.models:
            row = dataclasses.asdict(c)
            row.update(
                gpu_seconds=c.gpu_seconds,
                always_on_gpu_seconds=c.always_on_gpu_seconds,
                saved_replica_seconds=c.saved_replica_seconds,
                saved_gpu_seconds=c.saved_gpu_seconds,
                spent_money=priced(c.gpu_seconds, price),
                saved_money=priced(c.saved_gpu_seconds, price),
            )
            rows.append(row)
        return {"gpu_hour_price": price, "models": rows}


@dataclass(frozen=True)
class StatusDocument:
    """Every model (sorted by name), the scaler's warm pool, the start-up image builds, the
    last cold starts (newest first) and the cost of every model."""

    models: tuple[ModelStatus, ...]
    warm_pool: PoolStatus
    image_builds: Mapping[str, str] = field(default_factory=dict)
    cold_starts: tuple[ColdStartReport, ...] = ()
    cost: CostReport = field(default_factory=CostReport)
    shared: SharedReport = field(default_factory=SharedReport)

    def to_json(self) -> dict[str, Any]:
        """The document as JSON-ready dicts and lists."""
        return {
            "models": [_json_of(m) for m in self.models],
            "warm_pool": {
                **dataclasses.asdict(self.warm_pool),
                "idle_pss_bytes": list(self.warm_pool.idle_pss_bytes),
            },
            "image_builds": dict(self.image_builds),
            "cold_starts": [dataclasses.asdict(c) for c in self.cold_starts],
            "cost": self.cost.to_json(),
            "shared": self.shared.to_json(),
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
        colds = tuple(
            _cold_start(c, f"cold_starts[{i}]") for i, c in enumerate(_list(top, "cold_starts"))
        )
        return cls(
            models=models,
            warm_pool=_pool(pool),
            image_builds=builds,
            cold_starts=colds,
            cost=_cost(top.get("cost")),
            shared=SharedReport.from_json(top.get("shared")),
        )


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


def _optional(doc: dict[str, Any], key: str, kind: type, where: str) -> Any:
    """A field a document of an older `thaw up` may lack: as `_maybe`, None when absent."""
    return _maybe(doc, key, kind, where) if key in doc else None


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
        placement_class=_optional(doc, "placement_class", str, where),
        first_token_cold_s=_optional(doc, "first_token_cold_s", float, where),
        first_token_warm_s=_optional(doc, "first_token_warm_s", float, where),
        load_state=_optional(doc, "load_state", str, where),
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


def _float(doc: dict[str, Any], key: str, where: str) -> float:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _wrong(doc, key, "a number", where)
    return float(value)


def _cold_start(value: object, where: str) -> ColdStartReport:
    doc = _object(value, where)
    return ColdStartReport(
        model=_str(doc, "model", where),
        began_unix=_float(doc, "began_unix", where),
        claim_s=_maybe(doc, "claim_s", float, where),
        restore_s=_maybe(doc, "restore_s", float, where),
        warmup_s=_maybe(doc, "warmup_s", float, where),
        total_s=_maybe(doc, "total_s", float, where),
        error=_maybe(doc, "error", str, where),
    )


def _cost(value: object) -> CostReport:
    doc = _object(value, "cost")
    rows = []
    for i, row in enumerate(_list(doc, "models", "cost")):
        where = f"cost.models[{i}]"
        row = _object(row, where)
        rows.append(
            CostFigures(
                model=_str(row, "model", where),
                observed_s=_float(row, "observed_s", where),
                replica_seconds=_float(row, "replica_seconds", where),
                gpus_per_replica=_int(row, "gpus_per_replica", where),
                idle_at_zero_s=_float(row, "idle_at_zero_s", where),
                peak_replicas=_int(row, "peak_replicas", where),
                always_on_replica_seconds=_float(row, "always_on_replica_seconds", where),
            )
        )
    price = _maybe(doc, "gpu_hour_price", float, "cost")
    return CostReport(gpu_hour_price=price, models=tuple(rows))


E = TypeVar("E", bound=StrEnum)


def _enum(kind: type[E], value: str, where: str) -> E:
    try:
        return kind(value)
    except ValueError:
        known = ", ".join(m.value for m in kind)
        raise ValueError(f"{where}: state {value[:40]!r} is not one of {known}") from None
