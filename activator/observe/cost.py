"""What one model's replicas cost, and what always-on replicas at its observed peak would have.

Pure and clock-injected: the fleet calls `CostLedger.observe(now, running=, ready=)` every
autoscaler tick and reads `figures(now)`. Between two observations the replica count is the
one last observed (a step function), so `replica_seconds` is its integral over time:

    replica_seconds           = ∫ running replicas dt        (starting + ready + draining)
    idle_at_zero_s            = time with no replica running
    peak_replicas             = most replicas ready at once  (what the load needed)
    always_on_replica_seconds = peak_replicas x observed_s   (an always-on deployment with
                                                              min_replicas = that peak)
    saved_replica_seconds     = always_on - used             (negative when starts that never
                                                              became ready cost more)

GPU-seconds are replica-seconds x `gpus_per_replica`, the GPUs one replica of the model holds
(`ModelEntry.gpus_per_replica`: the distinct devices of its KIND_GPU instance groups). A money
figure is GPU-seconds x a per-GPU-hour price (`priced`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CostFigures", "CostLedger", "priced"]


@dataclass(frozen=True)
class CostFigures:
    """One model's accounting since `thaw up` started; times in seconds."""

    model: str
    observed_s: float
    replica_seconds: float
    gpus_per_replica: int
    idle_at_zero_s: float
    peak_replicas: int
    always_on_replica_seconds: float

    @property
    def gpu_seconds(self) -> float:
        return self.replica_seconds * self.gpus_per_replica

    @property
    def saved_replica_seconds(self) -> float:
        return self.always_on_replica_seconds - self.replica_seconds

    @property
    def always_on_gpu_seconds(self) -> float:
        return self.always_on_replica_seconds * self.gpus_per_replica

    @property
    def saved_gpu_seconds(self) -> float:
        return self.saved_replica_seconds * self.gpus_per_replica

    @property
    def saved_fraction(self) -> float | None:
        """Saved / always-on (None while always-on would have cost nothing)."""
        base = self.always_on_replica_seconds
        return self.saved_replica_seconds / base if base > 0 else None


def priced(gpu_seconds: float, gpu_hour_price: float | None) -> float | None:
    """GPU-seconds as money at `gpu_hour_price` per GPU-hour (None without a price)."""
    return None if gpu_hour_price is None else gpu_seconds / 3600.0 * gpu_hour_price


class CostLedger:
    """Integrates one model's replica count over time (see the module docstring)."""

    def __init__(self, model: str, *, gpus_per_replica: int, now: float) -> None:
        self._model = model
        self._gpus = gpus_per_replica
        self._start = now
        self._last = now  # time of the last observation
        self._running = 0.0  # replicas running since then (a shared one: its share)
        self._replica_s = 0.0
        self._idle_s = 0.0
        self._peak = 0

    def observe(self, now: float, *, running: float, ready: int) -> None:
        """The model has `running` replicas (starting, ready or draining), `ready` of them
        routable, from `now` on; a replica shared by k models counts 1/k for each. A `now`
        before the last observation changes only counts."""
        self._replica_s, self._idle_s = self._accrued(now)
        self._last = max(self._last, now)
        self._running = max(0, running)
        self._peak = max(self._peak, ready)

    def figures(self, now: float) -> CostFigures:
        """The accounting up to `now` (the last observed count held since); reads only."""
        replica_s, idle_s = self._accrued(now)
        observed = max(0.0, max(now, self._last) - self._start)
        return CostFigures(
            model=self._model,
            observed_s=observed,
            replica_seconds=replica_s,
            gpus_per_replica=self._gpus,
            idle_at_zero_s=idle_s,
            peak_replicas=self._peak,
            always_on_replica_seconds=self._peak * observed,
        )

    def _accrued(self, now: float) -> tuple[float, float]:
        elapsed = max(0.0, now - self._last)
        idle = elapsed if self._running == 0 else 0.0
        return self._replica_s + self._running * elapsed, self._idle_s + idle
