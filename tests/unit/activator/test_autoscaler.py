"""Stepped-clock stories of the KPA-style autoscaler (no sleeping)."""

from __future__ import annotations

import dataclasses

from activator.config import ScaleSettings
from activator.endpoint.autoscaler import Autoscaler, kept_replicas

BASE = ScaleSettings(
    min_replicas=0,
    max_replicas=10,
    target_concurrency=10,
    scale_to_zero_grace_s=30,
    stable_window_s=60,
    panic_window_s=6,
    panic_threshold=2.0,
)


class Story:
    """Feeds one sample per second and records decisions."""

    def __init__(self, settings: ScaleSettings = BASE) -> None:
        self.scaler = Autoscaler(settings)
        self.now = 0.0
        self.ready = 0

    def run(self, seconds: int, concurrency: float) -> list[int]:
        out = []
        for _ in range(seconds):
            self.now += 1
            self.scaler.observe(self.now, concurrency)
            d = self.scaler.decide(self.now, self.ready, current=int(concurrency))
            self.ready = d.desired  # replicas come up instantly in these stories
            out.append(d.desired)
        return out


def test_never_used_model_stays_at_zero() -> None:
    story = Story()
    assert story.run(120, 0) == [0] * 120


def test_request_at_zero_wants_one_replica_immediately() -> None:
    scaler = Autoscaler(BASE)
    scaler.note_request(5.0)
    decision = scaler.decide(5.0, ready=0, current=1)
    assert decision.desired == 1


def test_steady_load_settles_at_ceil_of_average_over_target() -> None:
    story = Story()
    assert story.run(90, 35)[-1] == 4  # ceil(35 / 10)


def test_burst_enters_panic_and_scales_up_fast() -> None:
    story = Story()
    story.run(60, 10)  # one replica at a steady 10
    assert story.ready == 1
    burst = story.run(2, 80)
    decision = story.scaler.decide(story.now, story.ready, current=80)
    assert decision.panic
    # The panic window (6 s) sees the burst within two seconds: ceil((4*10 + 2*80) / 6 / 10)
    # = 4 replicas, where the stable window alone would say ceil(12.3 / 10) = 2.
    assert burst[-1] == 4


def test_no_scale_down_while_panicking() -> None:
    story = Story()
    story.run(60, 10)
    story.run(3, 100)
    peak = story.ready
    after = story.run(20, 10)  # burst over, but the panic holds for a stable window
    assert min(after) == peak
    assert story.scaler.decide(story.now, story.ready).panic


def test_unpanic_only_after_a_full_stable_window_without_burst() -> None:
    story = Story()
    story.run(60, 10)
    story.run(3, 100)  # over the threshold only at t=61 (ready catches up after that)
    story.run(57, 10)  # t=120: 59 s since the burst
    assert story.scaler.decide(story.now, story.ready).panic
    story.run(2, 10)  # t=122: a full stable window (60 s) without a burst
    decision = story.scaler.decide(story.now, story.ready)
    assert not decision.panic
    # Back to the stable average (a mix of 10s and the burst): well below the panic peak.
    assert decision.desired < 10


def test_slow_increase_never_panics() -> None:
    story = Story(dataclasses.replace(BASE, max_replicas=100))
    story.run(60, 100)
    assert story.ready == 10
    seen_panic = False
    for level in range(100, 160, 4):
        story.run(5, level)
        seen_panic |= story.scaler.decide(story.now, story.ready).panic
    assert not seen_panic
    assert 13 <= story.ready <= 16  # follows the stable average of the ramp


def test_unpanic_after_slow_increase() -> None:
    # After Knative's TestAutoscalerUnpanicAfterSlowIncrease: a burst starts panic; a slow
    # rise afterwards stays under the threshold, so panic ends one stable window later and
    # the count follows the stable average instead of the panic peak.
    story = Story(dataclasses.replace(BASE, max_replicas=100))
    story.run(60, 10)
    story.run(1, 300)  # burst
    assert story.scaler.decide(story.now, story.ready).panic
    for level in range(20, 140, 2):  # 60 s of slow increase
        story.run(1, level)
    story.run(2, 140)
    decision = story.scaler.decide(story.now, story.ready)
    assert not decision.panic
    assert decision.desired >= 8  # ceil(stable average ~ 80 / 10), never back to 1


def test_scale_to_zero_only_after_grace() -> None:
    story = Story(dataclasses.replace(BASE, stable_window_s=6, panic_window_s=6))
    story.run(10, 5)
    assert story.ready == 1
    idle = story.run(40, 0)
    # Grace is 30 s: still one replica at 29 s of idleness, zero from 30 s on.
    assert idle[28] == 1
    assert idle[30:] == [0] * 10


def test_requests_waiting_elsewhere_restart_the_idle_grace() -> None:
    # The scaling leader's view of a request held only on a follower: it never calls
    # `note_request` here, it only shows as `current`. Woken for it at t=0, the follower's
    # request done by t=0.2: the model keeps its replica through the grace, not 0.2 s.
    scaler = Autoscaler(BASE)
    assert scaler.decide(0.0, ready=0, current=1).desired == 1
    scaler.observe(0.2, 0.0, peak=0)
    assert scaler.decide(0.2, ready=1, current=0).desired == 1
    scaler.observe(29.9, 0.0, peak=0)
    assert scaler.decide(29.9, ready=1, current=0).desired == 1
    scaler.observe(30.0, 0.0, peak=0)
    assert scaler.decide(30.0, ready=1, current=0).desired == 0


def test_scale_down_delay_avoids_flapping() -> None:
    settings = dataclasses.replace(BASE, stable_window_s=6, scale_down_delay_s=10)
    story = Story(settings)
    story.run(10, 40)
    assert story.ready == 4
    # Load drops to 5 for 8 s: without delay the count would fall at once; with it, it holds.
    dropped = story.run(8, 5)
    assert dropped == [4] * 8
    later = story.run(10, 5)
    assert later[-1] == 1


def test_without_delay_the_count_follows_the_window() -> None:
    story = Story(dataclasses.replace(BASE, stable_window_s=6))
    story.run(10, 40)
    story.run(8, 5)
    assert story.ready == 1


def test_min_and_max_bound_every_decision() -> None:
    story = Story(dataclasses.replace(BASE, min_replicas=2, max_replicas=3))
    assert story.run(5, 0) == [2] * 5
    story.run(30, 500)
    assert story.ready == 3
    decision = story.scaler.decide(story.now, story.ready, current=500)
    assert "clamped" in decision.reason


def test_forget_drops_history() -> None:
    story = Story()
    story.run(10, 30)
    story.scaler.forget()
    assert story.scaler.decide(story.now, story.ready).desired == 0


def test_a_model_not_loaded_keeps_no_min_replicas() -> None:
    """Explicit model control (docs/decisions/0024): `min_replicas` holds only while loaded."""
    settings = dataclasses.replace(BASE, min_replicas=2, max_replicas=3)
    assert kept_replicas(settings, loaded=True) == 2
    assert kept_replicas(settings, loaded=False) == 0
    scaler = Autoscaler(settings)
    assert scaler.decide(1.0, 0, loaded=False).desired == 0  # not loaded: nothing kept
    assert scaler.decide(2.0, 0).desired == 2  # loaded: its minimum
    decision = scaler.decide(3.0, 2, loaded=False)  # unloaded: back to none
    assert (decision.desired, "clamped" in decision.reason) == (0, False)


def test_a_request_still_wakes_a_model_not_loaded() -> None:
    """The floor alone goes: a load's own warm-up request (before the model counts as
    loaded) is traffic as any other."""
    scaler = Autoscaler(dataclasses.replace(BASE, min_replicas=2, max_replicas=3))
    scaler.note_request(1.0)
    assert scaler.decide(1.0, 0, current=1, loaded=False).desired == 1


def test_a_burst_at_zero_then_silence_goes_to_zero_after_the_grace_not_the_stable_window() -> None:
    # A burst at zero panics (demand over 2x the one replica); the requests then stop. The
    # panic holds the count for a stable window (60 s) after its burst, but no request for the
    # whole grace (30 s) is newer evidence: the model goes to zero then, not at 60 s.
    story = Story()
    burst = story.run(3, 40)
    assert story.scaler.decide(story.now, story.ready).panic
    assert max(burst) >= 2
    idle = story.run(45, 0)
    assert idle[28] >= 1  # 29 s of silence: within the grace
    assert idle[30:] == [0] * 15
    assert not story.scaler.decide(story.now, story.ready).panic


def test_heavy_traffic_then_silence_goes_to_zero_after_the_grace() -> None:
    # 60 s at concurrency 30 (3 replicas of target 10), then nothing: the stable average
    # still says 2 replicas 30 s later; the grace says zero.
    story = Story()
    assert story.run(60, 30)[-1] == 3
    idle = story.run(40, 0)
    assert idle[30:] == [0] * 10


def test_a_wake_after_the_grace_starts_from_a_clean_history() -> None:
    # The busy past (3 replicas' worth in the stable window) does not size the next wake: one
    # request at zero wants one replica, as for a model never used.
    story = Story()
    story.run(60, 30)
    story.run(31, 0)
    assert story.ready == 0
    story.scaler.note_request(story.now + 1)
    assert story.scaler.decide(story.now + 1, 0, current=1).desired == 1
