"""Knative-KPA-style scaling policy for one model: pure, clock-injected, returns Decisions.

The stages of one decision read `observe -> desired -> panic -> delay -> zero -> bounds`:
concurrency samples are averaged over a stable and a panic window; desired replicas are
`ceil(average / target_concurrency)`; a burst (panic-window demand >= `panic_threshold` x
ready replicas) enters panic mode, in which the count never goes down while requests come,
and panic ends only once the stable window has seen a full window without a burst; the
highest desired count of the last `scale_down_delay_s` is kept (flap avoidance); after
`scale_to_zero_grace_s` without any request the model goes to zero, whatever the averages,
the delay or a panic say; the result is clamped to [min, max] replicas, where min is
`kept_replicas`: `min_replicas` for a loaded model, none for one that is not (explicit model
control, docs/decisions/0024).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from activator.config import ScaleSettings

__all__ = ["Autoscaler", "Decision", "kept_replicas"]


@dataclass(frozen=True)
class Decision:
    """What one model should run: `desired` replicas, whether in panic, and why."""

    desired: int
    panic: bool
    reason: str


def kept_replicas(settings: ScaleSettings, *, loaded: bool) -> int:
    """The replicas a model keeps however idle: its `min_replicas` while it is loaded; none
    while it is not (explicit model control: Triton loads nothing until asked, and an
    unloaded model's replicas drain; docs/decisions/0024)."""
    return settings.min_replicas if loaded else 0


class _Window:
    """Samples (time, value) kept for `span_s`; mean over any shorter window."""

    def __init__(self, span_s: float) -> None:
        self._span_s = span_s
        self._samples: deque[tuple[float, float]] = deque()

    def add(self, now: float, value: float) -> None:
        self._samples.append((now, value))
        while self._samples and self._samples[0][0] <= now - self._span_s:
            self._samples.popleft()

    def mean(self, now: float, window_s: float) -> float:
        values = [v for t, v in self._samples if t > now - window_s]
        return sum(values) / len(values) if values else 0.0


class Autoscaler:
    """Decides desired replicas for one model from observed concurrency."""

    def __init__(self, settings: ScaleSettings) -> None:
        self.settings = settings
        self._window = _Window(settings.stable_window_s)
        self._panic_since: float | None = None
        self._max_panic = 0
        self._last_active: float | None = None
        self._recent: deque[tuple[float, int]] = deque()

    def observe(self, now: float, concurrency: float, *, peak: int | None = None) -> None:
        """Record one sample of mean concurrency (held + in flight) over the last tick."""
        self._window.add(now, concurrency)
        if concurrency > 0 or (peak or 0) > 0:
            self._last_active = now

    def note_request(self, now: float) -> None:
        """A request arrived: the cold-start fast path makes the next decision >= 1."""
        self._last_active = now

    def forget(self) -> None:
        """Drop all history (an explicit unload): the next decision sees an idle model."""
        self._window = _Window(self.settings.stable_window_s)
        self._panic_since, self._max_panic, self._last_active = None, 0, None
        self._recent.clear()

    def decide(self, now: float, ready: int, *, current: int = 0, loaded: bool = True) -> Decision:
        """Desired replicas now, given `ready` replicas serving and `current` requests (held
        or in flight, here or on the other activators); `loaded` False (a model not loaded,
        in explicit model control) keeps no `min_replicas` (`kept_replicas`)."""
        s = self.settings
        if current > 0:
            # Requests waiting or running are traffic now, wherever they arrived: a request
            # held only on another activator never calls `note_request` here, and without
            # this the model would count as "never used" the moment it is woken for it.
            self._last_active = now
        stable = self._window.mean(now, s.stable_window_s)
        panic_avg = self._window.mean(now, s.panic_window_s)
        desired = math.ceil(stable / s.target_concurrency - 1e-9)
        desired_panic = math.ceil(panic_avg / s.target_concurrency - 1e-9)
        desired, reason = self._apply_panic(now, ready, desired, desired_panic, stable)
        desired = self._apply_delay(now, desired)
        desired, reason = self._apply_zero(now, desired, reason, current)
        floor = kept_replicas(s, loaded=loaded)
        bounded = min(max(desired, floor), s.max_replicas)
        if bounded != desired:
            reason = f"{reason}; clamped to [{floor}, {s.max_replicas}]"
        return Decision(desired=bounded, panic=self._panic_since is not None, reason=reason)

    def _apply_panic(
        self, now: float, ready: int, desired: int, desired_panic: int, stable: float
    ) -> tuple[int, str]:
        s = self.settings
        over = desired_panic / max(ready, 1) >= s.panic_threshold
        if over:
            self._panic_since = now
        elif self._panic_since is not None and now - self._panic_since >= s.stable_window_s:
            self._panic_since, self._max_panic = None, 0
        if self._panic_since is None:
            return desired, f"stable average {stable:.2f} / target {s.target_concurrency:g}"
        self._max_panic = max(self._max_panic, desired_panic)
        return self._max_panic, f"panic: burst needs {desired_panic}, holding {self._max_panic}"

    def _apply_delay(self, now: float, desired: int) -> int:
        delay = self.settings.scale_down_delay_s
        self._recent.append((now, desired))
        while self._recent and self._recent[0][0] < now - delay:
            self._recent.popleft()
        return max(d for _, d in self._recent) if delay > 0 else desired

    def _apply_zero(self, now: float, desired: int, reason: str, current: int) -> tuple[int, str]:
        grace = self.settings.scale_to_zero_grace_s
        recent = self._last_active is not None and now - self._last_active < grace
        active = current > 0 or recent
        if active and desired == 0:
            why = "requests waiting" if current > 0 else "keep one replica through the idle grace"
            return 1, why
        if not active:
            # No request for the whole grace is the newest evidence there is: the stable
            # average (up to a stable window old) and a panic (held for a stable window after
            # its burst) size replicas under traffic, and would keep an idle model warm for
            # up to a stable window past its grace. Its history goes with its replicas: a wake
            # starts from what the next requests show, not from the last burst.
            last_active = self._last_active
            if desired > 0 or self._panic_since is not None:
                self.forget()
                self._last_active = last_active
            return 0, "never used" if last_active is None else "idle past the grace"
        return desired, reason
