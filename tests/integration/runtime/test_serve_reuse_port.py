"""tritonserver's `--reuse-http-port` / `--reuse-grpc-port` on `thaw serve`: two real servers
listen on one HTTP and one gRPC port and each answers there; without the flags a second server
on a port in use is refused in the system's words."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient

from tests.fixtures.serve_process import ServeProcess, free_port

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not hasattr(socket, "SO_REUSEPORT"), reason="no SO_REUSEPORT here"),
]

StartServe = Callable[..., ServeProcess]


def _live(http_port: int, grpc_port: int) -> tuple[int, bool]:
    """`/v2/health/live`'s status and gRPC ServerLive, each on a new connection."""
    url = f"http://127.0.0.1:{http_port}/v2/health/live"
    with urllib.request.urlopen(url, timeout=10) as response:
        status = response.status
    with grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}") as client:
        return status, client.is_server_live()


def _refused(repo: Path, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "thaw.cli", "serve", str(repo), "--metrics-port=0", *argv],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_two_servers_share_one_http_and_one_grpc_port(
    tmp_path: Path, start_serve: StartServe
) -> None:
    http_port, grpc_port = free_port(), free_port()
    ports = (f"--http-port={http_port}", f"--grpc-port={grpc_port}", "--metrics-port=0")
    first, second = (
        start_serve(tmp_path, *ports, "--reuse-http-port=true", "--reuse-grpc-port", "true")
        for _ in range(2)
    )
    for server in (first, second):
        assert server.url == f"http://127.0.0.1:{http_port}"
        assert server.grpc_address == f"127.0.0.1:{grpc_port}"
    assert _live(http_port, grpc_port) == (200, True)
    # Without the flags the port is in use: gRPC's is met first, then (gRPC shared) HTTP's.
    no_reuse = _refused(tmp_path, *ports)
    http_alone = _refused(tmp_path, *ports, "--reuse-grpc-port=true")
    _, no_reuse_err = no_reuse.communicate(timeout=60)
    _, http_alone_err = http_alone.communicate(timeout=60)
    assert no_reuse.returncode == 1, no_reuse_err
    assert f"cannot listen for gRPC on 127.0.0.1:{grpc_port}: Address already in use" in (
        no_reuse_err
    )
    assert http_alone.returncode == 1, http_alone_err
    assert f"cannot listen on 127.0.0.1:{http_port}: Address already in use" in http_alone_err
    # Each of the two listens for itself: with the first stopped, the second answers alone.
    assert first.stop() == 0
    assert _live(http_port, grpc_port) == (200, True)
    assert second.proc.poll() is None
