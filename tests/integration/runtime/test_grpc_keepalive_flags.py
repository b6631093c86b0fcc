"""tritonserver's gRPC keepalive flags (thawserver.grpc_keepalive) reach the gRPC server of
`thaw serve` and `thaw up`'s front door: a connection older than `--grpc-max-connection-age`
plus its grace is closed (an open stream ends), as with Triton; without the flags it stays."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from tests.fixtures.serve_process import ServeProcess
from tests.fixtures.up_process import UpProcess, light_args

pytestmark = pytest.mark.integration

_STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"
_AGED = ("--grpc-max-connection-age=300", "--grpc-max-connection-age-grace=300")


def _stream_ends_within(address: str, seconds: float) -> grpc.StatusCode | None:
    """Open a stream that sends nothing; how it ended within `seconds` (None: still open)."""
    with grpc.insecure_channel(address) as channel:
        call = channel.stream_stream(_STREAM)(_idle(seconds))
        try:
            for _ in call:
                pass
        except grpc.RpcError as exc:
            code: grpc.StatusCode = exc.code()
            return None if code is grpc.StatusCode.CANCELLED else code
        return grpc.StatusCode.OK


def _idle(seconds: float):  # type: ignore[no-untyped-def]
    """A request iterator that sends nothing for `seconds`, then half-closes."""
    time.sleep(seconds)
    return
    yield b""


def test_thaw_serve_closes_connections_at_their_max_age(
    start_serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    aged = start_serve(tmp_path, *_AGED)
    plain = start_serve(tmp_path)
    started = time.monotonic()
    assert _stream_ends_within(aged.grpc_address, 20) is grpc.StatusCode.UNAVAILABLE
    assert time.monotonic() - started < 15
    # Without the flags the same idle stream lives until the client half-closes it.
    assert _stream_ends_within(plain.grpc_address, 2) is grpc.StatusCode.OK


def test_thaw_up_front_door_closes_connections_at_their_max_age(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    up = UpProcess(repo, *light_args(repo), *_AGED)
    try:
        assert _stream_ends_within(up.grpc_address, 20) is grpc.StatusCode.UNAVAILABLE
    finally:
        up.stop()


@pytest.mark.parametrize("command", ["serve", "up"])
@pytest.mark.parametrize(
    ("flag", "why"),
    [
        ("--grpc-keepalive-time=-1", "-1 is not in [0, 2147483647]"),
        ("--grpc-http2-max-ping-strikes=two", "invalid whole number 'two'"),
        ("--grpc-keepalive-permit-without-calls=maybe", "--grpc-keepalive-permit-without-calls"),
    ],
)
def test_bad_values_are_refused_at_start(command: str, flag: str, why: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "thaw.cli", command, str(tmp_path), "--port", "0", flag],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert why in done.stderr
