"""The CPU a server's process tree spent: its own and its children's (the stubs'); a thread's
CPU and sleeps read from /proc, summed per process."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import psutil

from benchmarks.proc_cpu import Counters, parse_task, process_counters, tree_cpu_s

# A parent that starts a child; both burn CPU until told to stop (a line on stdin).
_TREE = """
import subprocess, sys, threading
child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
print(child.pid, flush=True)
while not stop.is_set():
    pass
child.kill(); child.wait()
"""


def test_the_tree_counts_the_children_and_a_gone_process_counts_nothing() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", _TREE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None and parent.stdin is not None
        child = int(parent.stdout.readline())
        while tree_cpu_s(child) < 0.2:  # the child alone has burnt 0.2 s
            pass
        own = sum(psutil.Process(parent.pid).cpu_times()[:2])  # the parent's user+sys alone
        assert own > 0
        assert tree_cpu_s(parent.pid) >= own + 0.2  # the tree counts both
        parent.stdin.write("stop\n")
        parent.stdin.flush()
    finally:
        parent.wait(30)
    assert tree_cpu_s(parent.pid) == 0.0


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
