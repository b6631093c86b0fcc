"""A model's cold start: how many replicas a start from zero brings up, and how long it took.

A cold start is a start from no ready replica that requests are held for. `replicas_to_start`
is the rule for how many starts to begin and `release_cap` how its backlog is released to the
replicas as they come up (both pure); `ColdStartTimer` times one cold start from
the start to its first response and reports the phases (`thaw_cold_start_seconds`: claim,
restore, model_warmup (the config's `model_warmup` samples, run inside the load), warmup (ready
to first response), total) and keeps the model's last few as `ColdStartReport`s (`recent`, for
the status page), failed ones included. Starts by the autoscaler alone, with nobody waiting, are
not timed. For generative models it also keeps the time to first token of the last request
that found the model at zero and of the last that found it warm (`first_token`,
`thaw_time_to_first_token_seconds`): the cold start users of a chat model feel.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable

from activator.endpoint.replica import Replica
from activator.observe.metrics import Metrics
from activator.observe.status_document import ColdStartReport

__all__ = ["KEEP_RECENT", "ColdStartTimer", "release_cap", "replicas_to_start"]

logger = logging.getLogger(__name__)


def replicas_to_start(*, desired: int, ready: int, starting: int, min_replicas: int) -> int:
    """Replica starts to begin now so that `desired` replicas can be reached (>= 0).

    The cold-start rule: while none is ready, exactly one start is in progress however many
    requests are held and whatever the autoscaler asks for (up to `min_replicas` of them when
    the model keeps more than one): extra processes would compete with the first for the
    CPUs and the warm pool, and once the first serves, the autoscaler sees the real load.
    """
    missing = desired - ready - starting
    if ready == 0:
        missing = min(missing, max(1, min_replicas) - starting)
    return max(0, missing)


def release_cap(
    *, container_concurrency: int, target_concurrency: float, waited_s: float, wait_s: float
) -> int | None:
    """The most in-flight requests a replica is given from the held queue now; None: as many
    as its breaker takes (the per-replica limit, `container_concurrency`, or none).

    Without a per-replica limit (`container_concurrency` 0) a replica would take the whole
    queue at once: a burst held at zero all went to the first replica up, and the replicas
    the autoscaler then started for it had nothing left to serve (docs/scale-to-zero.md). The
    queue is released `target_concurrency` (rounded up) per replica instead: the rest stays
    held, counts as load once the backlog's panic window is over, and goes to the replicas it
    starts as they come up. `waited_s` is how long the oldest held request has waited of its
    `wait_s` (activation timeout): past half of it the queue is released whole, as before, so
    that a burst the model at `max_replicas` cannot absorb waits on the replicas rather than
    timing out (504) in the activator. With a per-replica limit the limit alone spreads it.
    """
    if container_concurrency > 0 or waited_s >= wait_s / 2:
        return None
    return max(1, math.ceil(target_concurrency - 1e-9))


KEEP_RECENT = 10
"""Cold starts of one model kept for the status page (the fleet shows the newest of all)."""


class ColdStartTimer:
    """Times one model's cold starts; `last_s` is the latest one's total, in seconds, and
    `recent` the last KEEP_RECENT of them, oldest first. `clock` is monotonic; `wall` (Unix
    time) only dates the reports."""

    def __init__(
        self,
        model: str,
        metrics: Metrics,
        clock: Callable[[], float],
        *,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._model = model
        self._metrics = metrics
        self._clock = clock
        self._wall = wall
        self._started_at: float | None = None  # a cold start in progress, from this time
        self._claimed = False  # its first replica is up (later ones are not timed)
        self.last_s: float | None = None
        self.recent: deque[ColdStartReport] = deque(maxlen=KEEP_RECENT)
        self.first_token_cold_s: float | None = None
        self.first_token_warm_s: float | None = None

    def begin(self, *, requests_waiting: bool) -> None:
        """The first start from zero begins: a cold start when requests wait for it."""
        self._started_at = self._clock() if requests_waiting else None
        self._claimed = False

    def abandon(self, reason: str | None = None) -> None:
        """Every start failed (`reason`): no cold start is in progress any more."""
        if self._started_at is not None:
            elapsed = self._clock() - self._started_at
            report = ColdStartReport(
                self._model, self._wall() - elapsed, None, None, None, None, reason or "failed"
            )
            self.recent.append(report)
        self._started_at = None

    def replica_up(self, replica: Replica) -> None:
        """A started replica is ready; the first of a cold start carries its start time until
        its first response (`served`), and its claim and restore phases are reported."""
        if self._started_at is None or self._claimed:
            return
        self._claimed = True
        replica.cold_start_t0 = self._started_at
        phases = self._metrics.cold_start
        handle = replica.handle
        phases.labels(self._model, "claim").observe(handle.claim_s)
        phases.labels(self._model, "restore").observe(max(0.0, handle.restore_s - handle.warmup_s))
        if handle.warmup_s > 0:
            phases.labels(self._model, "model_warmup").observe(handle.warmup_s)

    def first_token(self, seconds: float, *, cold: bool) -> None:
        """A generative request's answer started `seconds` after it arrived, which found no
        replica ready (`cold`) or one ready."""
        self._metrics.first_token.labels(self._model, "true" if cold else "false").observe(seconds)
        if cold:
            self.first_token_cold_s = seconds
        else:
            self.first_token_warm_s = seconds

    def served(self, replica: Replica) -> None:
        """The cold start's replica answered its first request: the cold start is over."""
        t0 = replica.cold_start_t0
        if t0 is None:
            return
        now = self._clock()
        total = now - t0
        self._metrics.cold_start.labels(self._model, "warmup").observe(now - replica.ready_at)
        self._metrics.cold_start.labels(self._model, "total").observe(total)
        self.last_s = total
        handle = replica.handle
        self.recent.append(
            ColdStartReport(
                self._model,
                began_unix=self._wall() - total,
                claim_s=handle.claim_s,
                restore_s=handle.restore_s,
                warmup_s=now - replica.ready_at,
                total_s=total,
            )
        )
        replica.cold_start_t0 = None
        self._started_at = None
        logger.info("model=%s cold start served in %.3f s", self._model, total)
