"""Triton statistics for a model behind the activator: its live replicas' answers, merged.

Each replica counts only what it served; the model's statistics are the sum over its live
replicas (busy ones too), and zeros in the replica's shape when none is up.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import aiohttp

__all__ = ["fetch_stats", "merge_stats", "zero_stats"]

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
_TIMEOUT = aiohttp.ClientTimeout(total=10)


def zero_stats(name: str, version: str) -> dict[str, Any]:
    """One `model_stats` row of a model no replica has served (the runtime's shape)."""
    return {
        "name": name,
        "version": version,
        "last_inference": 0,
        "inference_count": 0,
        "execution_count": 0,
        "inference_stats": {p: {"count": 0, "ns": 0} for p in _PHASES},
        "batch_stats": [],
        "memory_usage": [],
        "response_stats": {},
    }


async def fetch_stats(
    session: aiohttp.ClientSession, urls: Sequence[str], path: str
) -> list[dict[str, Any]] | None:
    """GET `path` from every replica URL and merge the rows; None when no replica answered."""

    async def one(url: str) -> list[dict[str, Any]] | None:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
            async with session.get(url + path, timeout=_TIMEOUT) as resp:
                if resp.status == 200:
                    doc = await resp.json()
                    rows = doc.get("model_stats") if isinstance(doc, dict) else None
                    return rows if isinstance(rows, list) else None
        return None

    answers = [a for a in await asyncio.gather(*(one(u) for u in urls)) if a is not None]
    return merge_stats(answers) if answers else None


def merge_stats(answers: Sequence[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Rows keyed by (name, version): counts and times summed, last_inference the latest."""
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for rows in answers:
        for row in rows:
            key = (str(row.get("name")), str(row.get("version")))
            if key not in merged:
                merged[key] = _copy(row)
            else:
                _add(merged[key], row)
    return list(merged.values())


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _add(into: dict[str, Any], row: dict[str, Any]) -> None:
    for key, value in row.items():
        mine = into.get(key)
        if key == "last_inference" and isinstance(value, int) and isinstance(mine, int):
            into[key] = max(mine, value)
        elif key == "batch_stats" and isinstance(value, list) and isinstance(mine, list):
            by_size = {b.get("batch_size"): b for b in mine if isinstance(b, dict)}
            for batch in value:
                if isinstance(batch, dict) and batch.get("batch_size") in by_size:
                    _add(by_size[batch.get("batch_size")], batch)
                else:
                    mine.append(_copy(batch))
        elif isinstance(value, dict) and isinstance(mine, dict):
            _add(mine, value)
        elif _summed(key) and isinstance(value, int) and isinstance(mine, int):
            into[key] = mine + value


def _summed(key: str) -> bool:
    return key in ("count", "ns") or key.endswith("_count")
