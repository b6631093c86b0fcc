"""tritonserver's `--id` names the server in its metadata (`/v2` and gRPC ServerMetadata), on
`thaw serve` and at `thaw up`'s front doors, as Triton answers; "triton" without it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.fixtures.serve_process import ServeProcess
from tests.fixtures.up_process import UpProcess, light_args

pytestmark = pytest.mark.integration


def _names(hostport: str, grpc_address: str) -> tuple[str, str]:
    http = httpclient.InferenceServerClient(hostport)
    grpc = grpcclient.InferenceServerClient(grpc_address)
    try:
        return http.get_server_metadata()["name"], grpc.get_server_metadata().name
    finally:
        http.close()
        grpc.close()


def test_thaw_serve_answers_its_id(
    start_serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    named = start_serve(tmp_path, "--id=edge-7")
    plain = start_serve(tmp_path)
    assert _names(named.hostport, named.grpc_address) == ("edge-7", "edge-7")
    assert _names(plain.hostport, plain.grpc_address) == ("triton", "triton")


def test_thaw_up_answers_its_id(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    up = UpProcess(repo, *light_args(repo), "--id", "edge-8")
    try:
        assert _names(up.hostport, up.grpc_address) == ("edge-8", "edge-8")
    finally:
        up.stop()
