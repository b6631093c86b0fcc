"""Limits the session `thaw up` of these tests runs with (conftest.py passes them as flags)."""

from __future__ import annotations

from pathlib import Path

MAX_BODY_BYTES = 4 * 1024 * 1024  # --max-body-bytes


def hold_file(repo: Path, model: str) -> Path:
    """While this file exists, calls of `model` (`slow`, `overflow`) execute until it is removed,
    for at most the seconds written in it, not their usual seconds: a test holds a call as long
    as it needs (make_slow_execute's `hold_file`)."""
    return repo.parent / f"{repo.name}.{model}.hold"
