"""How long to wait before retrying a failed Kubernetes API call: pure, rng injected.

Doubling from `first_s` up to `max_s` with "full jitter" (a uniform draw up to the doubled
value, so many activators that failed together do not retry together), never below a
server's `Retry-After` (429 Too Many Requests, 503). Which failures are worth a retry is the
caller's: `retryable(status)`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["Backoff", "retryable"]

# 0: no answer (connection refused or reset, timeout); 429: throttled; 5xx: the server's fault.
_RETRYABLE = frozenset({0, 429, 500, 502, 503, 504})


def retryable(status: int) -> bool:
    """Whether an API failure with HTTP `status` may succeed when tried again as it was."""
    return status in _RETRYABLE


@dataclass(frozen=True)
class Backoff:
    """Delays in seconds; `attempt` counts failures so far, from 1."""

    first_s: float = 0.1
    max_s: float = 5.0

    def delay(self, attempt: int, rng: random.Random, *, retry_after_s: float = 0.0) -> float:
        ceiling = min(self.max_s, self.first_s * 2 ** max(0, attempt - 1))
        return max(retry_after_s, rng.uniform(self.first_s / 2, ceiling))
