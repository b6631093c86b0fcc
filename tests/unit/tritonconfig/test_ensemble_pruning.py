"""Which of an ensemble's steps a request runs: Triton prunes the steps no requested output
needs (qa/L0_simple_ensemble)."""

from __future__ import annotations

from tritonconfig import EnsembleStep, needed_steps


def _step(index: int, reads: dict[str, str], writes: dict[str, str]) -> EnsembleStep:
    return EnsembleStep(index, f"m{index}", -1, reads, writes)


# L0_simple_ensemble's shape: OUT0 <- s2 <- s0 <- IN0; OUT1 <- s3 <- s1 <- IN1.
STEPS = [
    _step(0, {"X": "IN0"}, {"Y": "a"}),
    _step(1, {"X": "IN1"}, {"Y": "b"}),
    _step(2, {"X": "a"}, {"Y": "OUT0"}),
    _step(3, {"X": "b"}, {"Y": "OUT1"}),
]
OUTPUTS = ("OUT0", "OUT1")


def _indexes(requested: tuple[str, ...]) -> list[int]:
    return [step.index for step in needed_steps(STEPS, OUTPUTS, requested)]


def test_no_requested_output_runs_every_step() -> None:
    assert _indexes(()) == [0, 1, 2, 3]


def test_one_requested_output_runs_only_the_steps_it_needs() -> None:
    assert _indexes(("OUT0",)) == [0, 2]
    assert _indexes(("OUT1",)) == [1, 3]


def test_an_unrequested_output_another_step_reads_keeps_its_step() -> None:
    steps = [_step(0, {"X": "IN"}, {"Y": "OUT1"}), _step(1, {"X": "OUT1"}, {"Y": "OUT0"})]
    assert [s.index for s in needed_steps(steps, OUTPUTS, ("OUT0",))] == [0, 1]


def test_a_step_with_an_output_nothing_reads_is_kept_as_in_triton() -> None:
    steps = [*STEPS, _step(4, {"X": "IN0"}, {"Y": "dangling"})]
    assert [s.index for s in needed_steps(steps, OUTPUTS, ("OUT0",))] == [0, 2, 4]
