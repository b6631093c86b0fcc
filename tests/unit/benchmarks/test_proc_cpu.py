"""The CPU a server's process tree spent: its own and its children's (the stubs')."""

from __future__ import annotations

import subprocess
import sys

import psutil

from benchmarks.proc_cpu import tree_cpu_s

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
