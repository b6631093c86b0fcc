"""The fork server's control protocol: frames in any split, strict refusals."""

from __future__ import annotations

import pytest

from thawwire.pool_protocol import (
    MAX_FRAME_BYTES,
    FrameDecoder,
    Op,
    PoolProtocolError,
    encode_frame,
)


def test_frames_survive_any_split() -> None:
    frames = encode_frame(Op.FORK, id=1, argv=["repo", "--port", "0"]) + encode_frame(
        Op.EXITED, pid=42, status=-15
    )
    decoder = FrameDecoder()
    got = []
    for i in range(len(frames)):  # one byte at a time
        got += decoder.feed(frames[i : i + 1])
    assert got == [
        {"op": "fork", "id": 1, "argv": ["repo", "--port", "0"]},
        {"op": "exited", "pid": 42, "status": -15},
    ]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"[1]", "frame must be a JSON object"),
        (b'{"op": "explode"}', "unknown op 'explode'"),
        (b'{"op": "fork", "id": 1}', "'fork' frame: 'argv' must be list"),
        (b'{"op": "fork", "id": true, "argv": []}', "'fork' frame: 'id' must be int"),
        (b'{"op": "fork", "id": 1, "argv": [1]}', "every argv item must be a string"),
        (b"{not json", "frame is not JSON"),
    ],
)
def test_bad_frames_are_refused_saying_why(body: bytes, message: str) -> None:
    frame = len(body).to_bytes(4, "big") + body
    with pytest.raises(PoolProtocolError, match=message):
        FrameDecoder().feed(frame)


def test_a_frame_over_the_limit_is_refused_before_it_is_buffered() -> None:
    with pytest.raises(PoolProtocolError, match="must be <="):
        FrameDecoder().feed((MAX_FRAME_BYTES + 1).to_bytes(4, "big"))
    with pytest.raises(PoolProtocolError, match="must be <="):
        encode_frame(Op.FORK, id=1, argv=["x" * MAX_FRAME_BYTES])


def test_encoding_checks_the_fields_of_its_op() -> None:
    with pytest.raises(PoolProtocolError, match="'pid' must be int"):
        encode_frame(Op.FORKED, id=1, pid="12")
    ready = encode_frame(
        Op.READY, pid=1, threads=1, preloaded=["torch"], deferred=[], import_s=1
    )  # an int is a fine number of seconds
    assert FrameDecoder().feed(ready)[0]["import_s"] == 1
