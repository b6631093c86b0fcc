"""benchmarks/stub_wakeups.py: the per-request table (its /proc reads: test_proc_cpu.py)."""

from __future__ import annotations

import pytest

from benchmarks.proc_cpu import Counters
from benchmarks.stub_wakeups import DEFAULT_MODES, MODES, Cell, main, table


def test_the_table_gives_medians_per_request_and_the_tree_s_sum() -> None:
    cells = [
        Cell("process", 1, 1000.0, 1000, Counters(0.5, 2000), Counters(0.15, 1000)),
        Cell("process", 1, 1200.0, 1000, Counters(0.3, 1800), Counters(0.13, 1000)),
        Cell("process", 1, 1100.0, 1000, Counters(0.4, 1900), Counters(0.14, 1000)),
        Cell("in_process", 1, 2000.0, 2000, Counters(0.6, 2000), Counters()),
        Cell(
            "native_front",
            1,
            1500.0,
            1000,
            Counters(0.01, 5),
            Counters(0.14, 1000),
            Counters(0.1, 2000),
        ),
    ]
    text = table(cells)
    assert "| in_process | 1 | 1 | 2000 | 300 | 1.00 | 0 | 0.00 | 0 | 0.00 | 300 |" in text
    assert "| process | 1 | 3 | 1100 | 400 | 1.90 | 0 | 0.00 | 140 | 1.00 | 540 |" in text
    # The native front's process apart from the server's and the stub's.
    assert "| native_front | 1 | 1 | 1500 | 10 | 0.01 | 100 | 2.00 | 140 | 1.00 | 250 |" in text


def test_triton_and_the_spike_are_modes_on_request_and_an_unknown_mode_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for peer in (
        "triton",
        "native_spike",
        "native_front",
    ):  # each needs a server installed or built
        assert peer in MODES and peer not in DEFAULT_MODES
    with pytest.raises(SystemExit) as refused:
        main(["--modes", "process,tritonn"])
    assert refused.value.code == 2
    assert "unknown mode(s): tritonn" in capsys.readouterr().err
