"""Limits the session `thaw up` of these tests runs with (conftest.py passes them as flags)."""

from __future__ import annotations

from pathlib import Path

MAX_BODY_BYTES = 4 * 1024 * 1024  # --max-body-bytes


def slow_delay_file(repo: Path) -> Path:
    """While this file exists, the `slow` model's execute sleeps the seconds written in it, not
    3 s: a test makes the one call a replica dies in outlast any bound it asserts."""
    return repo.parent / f"{repo.name}.slow_delay_s"
