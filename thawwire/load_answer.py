"""What a runtime's answer to a load call tells `thaw up` beside its status: the warm-up time.

A model's `model_warmup` samples run inside the load call, before the model is ready; the
runtime reports how long they took in one response header, so the activator can report the
warm-up as its own phase of a cold start (`thaw_cold_start_seconds{phase="model_warmup"}`).
Triton's clients ignore the header (a load answer carries no body).
"""

from __future__ import annotations

import math

__all__ = ["WARMUP_SECONDS_HEADER", "warmup_header", "warmup_seconds"]

WARMUP_SECONDS_HEADER = "Thaw-Model-Warmup-Seconds"


def warmup_header(seconds: float) -> dict[str, str]:
    """The header for a load whose warm-up took `seconds` ({} when there was none)."""
    return {WARMUP_SECONDS_HEADER: f"{seconds:.6f}"} if seconds > 0 else {}


def warmup_seconds(value: str | None) -> float:
    """The warm-up seconds a load answer reports; 0 for none, or a value that is no time."""
    if value is None:
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        return 0.0
    return seconds if math.isfinite(seconds) and 0 <= seconds < 86400 else 0.0
