"""A stepped clock: time moves only when the test says so."""

from __future__ import annotations

__all__ = ["FakeClock"]


class FakeClock:
    """A monotonic clock for pure policies and endpoint stories: call it for `now` (seconds),
    move it with `advance` (or by setting `now`)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        """Step forward `seconds` (never back); returns the new time."""
        if seconds < 0:
            raise ValueError(f"a clock does not go back ({seconds} s)")
        self.now += seconds
        return self.now
