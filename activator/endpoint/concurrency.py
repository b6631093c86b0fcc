"""Time-weighted observed concurrency (held + in flight) of one model, sampled per tick."""

from __future__ import annotations

__all__ = ["ConcurrencyMeter"]


class ConcurrencyMeter:
    """Integrates the current concurrency over time; `sample` returns the mean since the last.

    Short requests that start and finish between two ticks still count, weighted by how long
    they were in the activator. Times are seconds from any monotonic clock, passed in.

    A cold start's *backlog* (the requests held while no replica was ready, see `restart`) is
    left out of the observed concurrency while it drains, for at most `backlog_s`: it woke the
    model, it does not measure the capacity needed (a burst at zero would otherwise scale a
    model to `max_replicas` the moment its first replica is ready). `current` counts it.
    """

    def __init__(self, now: float) -> None:
        self.current = 0
        self._since = now
        self._last_change = now
        self._area = 0.0
        self._peak = 0
        self._backlog = 0
        self._backlog_until = now

    def change(self, now: float, delta: int) -> None:
        """A request entered (+1) or left (-1) the activator."""
        # Plain comparisons rather than max(): this runs twice per request.
        backlog = self._backlog
        if now > self._last_change:
            if backlog and now > self._backlog_until:  # the backlog's window ends in this span
                split = self._backlog_until  # > self._last_change, or it would be 0 already
                self._area += (self.current - backlog) * (split - self._last_change)
                self._area += self.current * (now - split)
                backlog = self._backlog = 0
            else:
                self._area += (self.current - backlog) * (now - self._last_change)
        self._last_change = now
        current = self.current + delta
        self.current = current if current > 0 else 0
        if backlog:
            # Held requests leave first in, first out: the backlog is the oldest of them.
            backlog = backlog + delta if delta < 0 else backlog
            if backlog > self.current:
                backlog = self.current
            if backlog < 0 or now >= self._backlog_until:
                backlog = 0
            self._backlog = backlog
        observed = self.current - backlog
        if observed > self._peak:
            self._peak = observed

    def sample(self, now: float) -> tuple[float, int]:
        """(mean concurrency, peak concurrency) since the previous sample; starts a new one."""
        self.change(now, 0)
        span = now - self._since
        mean = self._area / span if span > 0 else float(self.current - self._backlog)
        peak = self._peak
        self._since, self._area, self._peak = now, 0.0, self.current - self._backlog
        return mean, peak

    def restart(self, now: float, *, backlog_s: float) -> None:
        """The first replica of a cold start is ready: start a new sample at `now`, forget the
        time before it, and leave the requests held now out for up to `backlog_s`."""
        self.change(now, 0)
        self._backlog, self._backlog_until = self.current, now + backlog_s
        self._since, self._area, self._peak = now, 0.0, 0
