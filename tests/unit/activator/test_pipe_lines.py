"""A child's pipe is read line by line for as long as it writes: a line over the reader's limit
is cut and marked, and the lines after it still arrive (asyncio's readline raised, and the
reader stopped: the child then blocked on a full pipe)."""

from __future__ import annotations

import asyncio

from activator.scaler.local.pipe_lines import CUT_MARK, HEAD_BYTES, lines


async def _read(chunks: list[bytes], limit: int) -> list[bytes]:
    stream = asyncio.StreamReader(limit=limit)
    for chunk in chunks:
        stream.feed_data(chunk)
    stream.feed_eof()
    return [line async for line in lines(stream)]


def test_lines_pass_as_they_are() -> None:
    got = asyncio.run(_read([b"one\ntw", b"o\n", b"last"], 64))
    assert got == [b"one\n", b"two\n", b"last"]


def test_an_overlong_line_is_cut_and_the_next_lines_still_arrive() -> None:
    long_line = b"x" * 1000 + b"\n"
    got = asyncio.run(_read([b"before\n", long_line, b"after\n", long_line * 2, b"end\n"], 64))
    assert got[0] == b"before\n"
    assert got[1].endswith(CUT_MARK) and set(got[1][: -len(CUT_MARK)]) == {ord("x")}

    assert got[2] == b"after\n"
    assert [line.endswith(CUT_MARK) for line in got[3:5]] == [True, True]
    assert got[5:] == [b"end\n"]


def test_what_is_kept_of_an_overlong_line_is_bounded() -> None:
    huge = b"h" * (3 * HEAD_BYTES) + b"\nnext\n"
    got = asyncio.run(_read([huge], 1024))
    assert len(got[0]) == HEAD_BYTES + len(CUT_MARK)
    assert got[1:] == [b"next\n"]


def test_an_overlong_line_fed_a_byte_at_a_time_and_one_ended_by_the_pipe() -> None:
    async def read() -> list[bytes]:
        stream = asyncio.StreamReader(limit=16)
        out: list[bytes] = []

        async def consume() -> None:
            out.extend([line async for line in lines(stream)])

        task = asyncio.create_task(consume())
        for byte in b"y" * 100 + b"\nok\n" + b"z" * 100:
            stream.feed_data(bytes([byte]))
            await asyncio.sleep(0)
        stream.feed_eof()
        await task
        return out

    got = asyncio.run(read())
    assert got[0].endswith(CUT_MARK)
    assert got[1] == b"ok\n"
    assert got[2:] == [got[2]] and got[2].endswith(CUT_MARK)
