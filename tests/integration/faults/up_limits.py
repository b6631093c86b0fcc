"""Limits the `thaw up` of the replica fault tests runs with (conftest.py passes them as flags)."""

from __future__ import annotations

REQUEST_TIMEOUT_S = 3.0  # --request-timeout-s
