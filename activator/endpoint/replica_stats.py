"""Triton statistics of a model behind the activator, monotonic for the life of `thaw up`.

Each replica counts only what it served, from zero when it starts. A model's statistics are
its live replicas' latest answers plus a ledger of the replicas already gone: a replica that
is retired (scale-down, scale to zero) has its final answer, fetched after its drain, folded
into the ledger before it stops; one that dies has its last answer seen folded. So the counts
never go back when replicas come and go, as Triton's never do while a model stays loaded.
Requests the activator answered itself (503 overflow, 504 held timeout) never reached a model
and are in no replica's counts: the activator's own metrics count them.

`StatsLedger` is the pure bookkeeping; `ModelStatistics` adds the HTTP reads of replicas.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import aiohttp

from activator.endpoint.replica import Replica
from activator.endpoint.replica_metrics import ModelMetrics

__all__ = [
    "ModelStatistics",
    "Rows",
    "StatsLedger",
    "merge_stats",
    "rows_for_versions",
    "zero_stats",
]

Rows = list[dict[str, Any]]

_PHASES = (
    "success",
    "fail",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    "cache_hit",
    "cache_miss",
)
_READ_TIMEOUT = aiohttp.ClientTimeout(total=10)
# The final read of a retiring replica holds up its stop: short, it answers from memory.
_FINAL_READ_TIMEOUT = aiohttp.ClientTimeout(total=2)


def zero_stats(name: str, version: str) -> dict[str, Any]:
    """One `model_stats` row of a model no replica has served (the runtime's shape)."""
    return {
        "name": name,
        "version": version,
        "last_inference": 0,
        "inference_count": 0,
        "execution_count": 0,
        "inference_stats": {p: {"count": 0, "ns": 0} for p in _PHASES},
        "response_stats": {},
        "batch_stats": [],
        "memory_usage": [],
    }


def rows_for_versions(name: str, versions: Iterable[str], merged: Rows | None) -> Rows:
    """One row per version asked for, in the runtime's order; zeros for a version never served."""
    by_version = {str(r.get("version")): r for r in merged or () if r.get("name") == name}
    return [by_version.get(v) or zero_stats(name, v) for v in sorted(versions)]


def merge_stats(answers: Sequence[Rows]) -> Rows:
    """Rows keyed by (name, version): counts and times summed, last_inference the latest,
    batch_stats merged by batch_size; memory_usage is the first answer's (live replicas first)."""
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for rows in answers:
        for row in rows:
            if not isinstance(row, dict):
                continue
            key = (str(row.get("name")), str(row.get("version")))
            if key not in merged:
                merged[key] = _copy(row)
            else:
                _add(merged[key], row)
    for row in merged.values():
        batches = row.get("batch_stats")
        if isinstance(batches, list):
            batches.sort(key=_batch_size)
    return [merged[k] for k in sorted(merged)]


class StatsLedger:
    """One model's statistics bookkeeping: the latest answer of each live replica, and the
    counts of every replica gone, folded for good. Pure: the caller does the reading."""

    def __init__(self) -> None:
        self._gone: Rows = []  # merged rows of every replica folded
        self._latest: dict[str, tuple[int, Rows]] = {}  # replica id -> (ticket, rows)
        self._folded: set[str] = set()  # ids of replicas gone: late answers are ignored
        self._tickets = itertools.count(1)

    def ticket(self) -> int:
        """Taken before a read: an answer never replaces one from a read begun later."""
        return next(self._tickets)

    def record(self, replica: str, ticket: int, rows: Rows) -> None:
        """A live replica's answer to the read that took `ticket`."""
        if replica in self._folded:
            return
        held = self._latest.get(replica)
        if held is None or held[0] < ticket:
            self._latest[replica] = (ticket, rows)

    def fold(self, replica: str, final: Rows | None = None) -> None:
        """The replica is gone: its `final` answer, or else the last one seen, counts for good."""
        if replica in self._folded:
            return
        self._folded.add(replica)
        held = self._latest.pop(replica, None)
        rows = final if final is not None else held[1] if held is not None else []
        if rows:
            self._gone = merge_stats([self._gone, [_gone_row(r) for r in rows]])

    def total(self, live: Iterable[str]) -> Rows | None:
        """The model's rows: replicas not in `live` (died) are folded first. None when no
        replica ever answered."""
        still = set(live)
        for replica in [r for r in self._latest if r not in still]:
            self.fold(replica)
        answers = [rows for _, rows in self._latest.values()]
        if self._gone:
            answers.append(self._gone)  # last: memory_usage is a live replica's
        return merge_stats(answers) if answers else None


class ModelStatistics:
    """One model's statistics for the life of `thaw up`: reads its replicas into a ledger.

    `metrics` (activator.endpoint.replica_metrics) keeps the replicas' Prometheus series the
    same way; a retiring replica's final statistics and final series are read together."""

    def __init__(
        self,
        model: str,
        session: aiohttp.ClientSession | None,
        *,
        metrics: ModelMetrics | None = None,
    ) -> None:
        self.ledger = StatsLedger()
        self.metrics = metrics or ModelMetrics(None)
        self._path = f"/v2/models/{model}/stats"
        self._session = session  # None: nothing is read (tests of scaling alone)

    async def read(self, replicas: Callable[[], Sequence[Replica]]) -> Rows | None:
        """Ask every live replica (busy ones too; none is woken), then total the ledger
        against the replicas that exist once the answers are in."""
        ticket = self.ledger.ticket()
        asked = [r for r in replicas() if not r.dead]
        answers = await asyncio.gather(*(self._fetch(r.url, _READ_TIMEOUT) for r in asked))
        for replica, rows in zip(asked, answers, strict=True):
            if rows is not None:
                self.ledger.record(replica.id, ticket, rows)
        return self.ledger.total(r.id for r in replicas())

    async def retire(self, replica: Replica) -> None:
        """Before a replica stops: fold its final answer (the last one seen if it has none),
        and its final metrics."""
        final, _ = await asyncio.gather(
            self._fetch(replica.url, _FINAL_READ_TIMEOUT), self.metrics.retire(replica)
        )
        self.ledger.fold(replica.id, final)

    async def _fetch(self, url: str, limit: aiohttp.ClientTimeout) -> Rows | None:
        if self._session is None:
            return None
        with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
            async with self._session.get(url + self._path, timeout=limit) as resp:
                if resp.status == 200:
                    doc = await resp.json()
                    rows = doc.get("model_stats") if isinstance(doc, dict) else None
                    if isinstance(rows, list):
                        return [r for r in rows if isinstance(r, dict)]
        return None


def _gone_row(row: dict[str, Any]) -> dict[str, Any]:
    """A gone replica's row: its counts stay, the memory it held does not."""
    return {**_copy(row), "memory_usage": []}


def _batch_size(batch: Any) -> int:
    size = batch.get("batch_size") if isinstance(batch, dict) else None
    return size if isinstance(size, int) else 0


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _add(into: dict[str, Any], row: dict[str, Any]) -> None:
    for key, value in row.items():
        if key not in into:
            into[key] = _copy(value)
            continue
        mine = into[key]
        if key == "last_inference" and _is_int(value) and _is_int(mine):
            into[key] = max(mine, value)
        elif key == "batch_stats" and isinstance(value, list) and isinstance(mine, list):
            by_size = {b.get("batch_size"): b for b in mine if isinstance(b, dict)}
            for batch in value:
                size = batch.get("batch_size") if isinstance(batch, dict) else None
                if isinstance(batch, dict) and size in by_size:
                    _add(by_size[size], batch)
                elif isinstance(batch, dict):
                    by_size[size] = _copy(batch)
                    mine.append(by_size[size])
        elif isinstance(value, dict) and isinstance(mine, dict):
            _add(mine, value)
        elif _summed(key) and _is_int(value) and _is_int(mine):
            into[key] = mine + value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _summed(key: str) -> bool:
    return key in ("count", "ns") or key.endswith("_count")
