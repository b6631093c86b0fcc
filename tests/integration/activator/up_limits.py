"""Limits the session `thaw up` of these tests runs with (conftest.py passes them as flags)."""

from __future__ import annotations

MAX_BODY_BYTES = 4 * 1024 * 1024  # --max-body-bytes
