"""Limits the shared integration server runs with; small so over-limit tests stay cheap."""

from __future__ import annotations

MAX_BODY_BYTES = 1024 * 1024
BODY_TIMEOUT_S = 2.0
