"""The qa/L0_socket, qa/L0_config_json, qa/L0_cmdline_trace, qa/L0_custom_model_config,
qa/L0_vertex_ai and qa/L0_sagemaker runners: L0_socket's starts as a table, the test.sh shim
for each server, and a clean skip without a mirror for each."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance import (
    triton_l0_cmdline_trace,
    triton_l0_config_json,
    triton_l0_custom_model_config,
    triton_l0_sagemaker,
    triton_l0_socket,
    triton_l0_vertex_ai,
)
from tests.conformance.qa_test_sh import shim
from tests.conformance.triton_l0_socket import STARTS


def _expected(flags: str) -> bool:
    [start] = [s for s in STARTS if s.flags.strip() == flags]
    return start.starts


def test_the_table_holds_test_shs_starts_in_both_address_modes() -> None:
    assert len(STARTS) == 40  # 17 with default addresses, 23 with explicit ones
    assert _expected("--http-port -47 --allow-http 0")  # a listener off: its port not read
    assert _expected("--http-address -47 --allow-http 0")  # nor its address
    assert not _expected("--http-port 8003 --grpc-port 8003")  # two listeners on one port
    assert not _expected("--metrics-port 8001")  # metrics on gRPC's default port
    diff = "--http-address 127.0.0.1 --grpc-address 127.0.0.2 --metrics-address 127.0.0.3"
    assert _expected(f"{diff} --http-port 8007 --grpc-port 8007")  # one port, two addresses
    assert all(s.ready_url.startswith("http://127.0.0.1:800") for s in STARTS if s.ready_url)


def test_without_a_mirror_it_says_so_and_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for runner in (triton_l0_socket, triton_l0_config_json, triton_l0_cmdline_trace,
                   triton_l0_custom_model_config, triton_l0_vertex_ai,
                   triton_l0_sagemaker):  # fmt: skip
        assert runner.main(["--mirror", str(tmp_path / "none")]) == 0
        assert "skipped: no Triton server mirror" in capsys.readouterr().err


def test_the_shim_runs_the_server_asked_for(tmp_path: Path) -> None:
    serve, up = tmp_path / "serve", tmp_path / "up"
    serve.mkdir()
    up.mkdir()
    assert shim(serve).read_text().endswith(' -m thaw.cli serve "$@"\n')
    # thaw up: every model at zero, one warm-pool process, no image build, its cache beside
    expected = f' -m thaw.cli up --warm-pool 1 --no-image-build --cache "{up / "cache"}" "$@"\n'
    assert shim(up, "up").read_text().endswith(expected)
