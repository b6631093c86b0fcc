"""The command line that starts a local `thaw serve` runtime tied to the life of `thaw up`.

Replicas and pooled processes run `thaw serve` under this small launcher: a daemon thread
watches the process that started them and, once it is gone (even SIGKILLed, which leaves no
chance to drain), SIGTERMs the replica (graceful stop) and exits it 10 s later at most.
"""

from __future__ import annotations

import os
import sys

__all__ = ["fork_server_command", "serve_command"]

_PARENT_WATCH = """\
import os, runpy, signal, sys, threading, time
parent = int(sys.argv.pop(1))
def watch():
    while os.getppid() == parent:
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(10)
    os._exit(1)
threading.Thread(target=watch, name="thaw-parent-watch", daemon=True).start()
runpy.run_module("thaw.cli", run_name="__main__", alter_sys=True)
"""


def serve_command(parent_pid: int | None = None) -> tuple[str, ...]:
    """`thaw serve` that stops itself when `parent_pid` (default: this process) dies."""
    parent = os.getpid() if parent_pid is None else parent_pid
    return (sys.executable, "-c", _PARENT_WATCH, str(parent), "serve")


def fork_server_command() -> tuple[str, ...]:
    """`thaw serve` for the fork server, without the launcher: the launcher's watch thread
    would break the fork server's one rule (no thread when it forks). It stops when its
    control socket closes instead, which it does when `thaw up` dies."""
    return (sys.executable, "-m", "thaw.cli", "serve")
