"""Time-weighted observed concurrency (held + in flight) of one model, sampled per tick."""

from __future__ import annotations

__all__ = ["ConcurrencyMeter"]


class ConcurrencyMeter:
    """Integrates the current concurrency over time; `sample` returns the mean since the last.

    Short requests that start and finish between two ticks still count, weighted by how long
    they were in the activator. Times are seconds from any monotonic clock, passed in.
    """

    def __init__(self, now: float) -> None:
        self.current = 0
        self._since = now
        self._last_change = now
        self._area = 0.0
        self._peak = 0

    def change(self, now: float, delta: int) -> None:
        """A request entered (+1) or left (-1) the activator."""
        # Plain comparisons rather than max(): this runs twice per request.
        if now > self._last_change:
            self._area += self.current * (now - self._last_change)
        self._last_change = now
        current = self.current + delta
        self.current = current if current > 0 else 0
        if self.current > self._peak:
            self._peak = self.current

    def sample(self, now: float) -> tuple[float, int]:
        """(mean concurrency, peak concurrency) since the previous sample; starts a new one."""
        self.change(now, 0)
        span = now - self._since
        mean = self._area / span if span > 0 else float(self.current)
        peak = self._peak
        self._since, self._area, self._peak = now, 0.0, self.current
        return mean, peak

    def restart(self, now: float) -> None:
        """Start a new sample at `now`, forgetting the time before it (the first replica of a
        cold start is ready: the time its requests spent held at zero measured the wake-up,
        not the capacity needed)."""
        self.change(now, 0)
        self._since, self._area, self._peak = now, 0.0, self.current
