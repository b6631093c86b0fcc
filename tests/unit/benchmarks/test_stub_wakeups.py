"""benchmarks/stub_wakeups.py: a thread's CPU and sleeps read from /proc, summed per process
and per tree, and the per-request table."""

from __future__ import annotations

import os
import threading
import time

from benchmarks.stub_wakeups import Cell, Counters, parse_task, process_counters, table

_STATUS = "Name:\tthaw\nvoluntary_ctxt_switches:\t42\nnonvoluntary_ctxt_switches:\t7\n"


def test_a_thread_s_counters_even_with_parentheses_and_spaces_in_its_name() -> None:
    # utime 250 and stime 50 ticks are the 14th and 15th fields, after a comm of "a) (b c".
    stat = "123 (a) (b c) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0"
    assert parse_task(_STATUS, stat, 100) == Counters(3.0, 42)


def test_this_process_sleeps_are_counted_as_its_threads_sleep() -> None:
    napped, release = threading.Event(), threading.Event()

    def nap() -> None:
        for _ in range(20):
            time.sleep(0.001)
        napped.set()
        release.wait(10)

    before = process_counters(os.getpid())
    sleeper = threading.Thread(target=nap)
    sleeper.start()
    napped.wait(10)
    after = process_counters(os.getpid())  # while it lives: a thread's counts go with it
    release.set()
    sleeper.join()
    assert after.sleeps - before.sleeps >= 20  # each sleep is one voluntary switch at least
    assert process_counters(2**22 + 12345) == Counters()  # no such process: zeros


def test_the_table_gives_medians_per_request_and_the_tree_s_sum() -> None:
    cells = [
        Cell("process", 1, 1000.0, 1000, Counters(0.5, 2000), Counters(0.15, 1000)),
        Cell("process", 1, 1200.0, 1000, Counters(0.3, 1800), Counters(0.13, 1000)),
        Cell("process", 1, 1100.0, 1000, Counters(0.4, 1900), Counters(0.14, 1000)),
        Cell("in_process", 1, 2000.0, 2000, Counters(0.6, 2000), Counters()),
    ]
    text = table(cells)
    assert "| in_process | 1 | 1 | 2000 | 300 | 1.00 | 0 | 0.00 | 300 |" in text
    assert "| process | 1 | 3 | 1100 | 400 | 1.90 | 140 | 1.00 | 540 |" in text
