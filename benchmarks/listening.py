"""Where a `thaw serve` or `thaw up` started by a benchmark listens: the URL it announces on
stdout (`THAW_LISTENING <url>`) once ready."""

from __future__ import annotations

import queue
import subprocess
import threading
import time

__all__ = ["announced_url"]

_ANNOUNCE = "THAW_LISTENING "


def announced_url(proc: subprocess.Popen[bytes], timeout_s: float, what: str) -> str:
    """The URL `proc` announces, within `timeout_s` even if it prints nothing (a reader
    thread: a buffered pipe cannot be waited on line by line with select); RuntimeError
    naming `what` otherwise."""
    assert proc.stdout is not None
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.put(raw.decode(errors="replace").strip())

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        if line.startswith(_ANNOUNCE):
            return line.removeprefix(_ANNOUNCE)
    raise RuntimeError(f"{what} did not report where it listens within {timeout_s:.0f} s")
