"""A forked child's stdout/stderr pipe is closed in the activator once the child is gone.

Regression: StreamReaderProtocol asks to keep a transport open at EOF, and uvloop (the
activator's loop) honours that for pipes, so each forked pool process left two fds open
until the garbage collector happened to find its transports (found by benchmarks/soak.py)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

import pytest
import uvloop

from activator.scaler.local.fork_server import _reader


def _same_pipe_open(fd: int, inode: int) -> bool:
    try:
        return os.fstat(fd).st_ino == inode
    except OSError:
        return False


@pytest.mark.parametrize(
    "new_loop", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"]
)
def test_the_read_end_is_closed_at_eof(new_loop: Callable[[], asyncio.AbstractEventLoop]) -> None:
    async def scenario() -> bool:
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        inode = os.fstat(read_fd).st_ino
        reader = await _reader(read_fd)
        os.write(write_fd, b"THAW_LISTENING http://127.0.0.1:1\n")
        os.close(write_fd)  # the child exits
        assert await reader.readline() == b"THAW_LISTENING http://127.0.0.1:1\n"
        assert await reader.readline() == b""
        for _ in range(100):
            if not _same_pipe_open(read_fd, inode):
                break
            await asyncio.sleep(0.01)
        still_open = _same_pipe_open(read_fd, inode)
        del reader  # held until here: the fd must not wait for the reader to be collected
        return still_open

    loop = new_loop()
    try:
        assert not loop.run_until_complete(scenario())
    finally:
        loop.close()
