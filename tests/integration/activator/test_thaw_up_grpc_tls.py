"""`thaw up` with tritonserver's TLS flags on its gRPC front door: a model at zero is woken by a
TLS call with a client certificate (the activator reaches the replica over loopback plaintext),
a plaintext client and a client without a certificate are refused, and bad certificate files
stop the start, naming the flag."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.fixtures.models import make_add_sub
from tests.fixtures.tls_certs import Certificates, make_certificates, openssl_available
from tests.fixtures.up_process import UpProcess, light_args
from tests.support.grpc_tls_client import (
    add_sub_over,
    live_files,
    refusal_of,
    renewable,
    serves_a_renewal,
    trusting,
    with_client_cert,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not openssl_available(), reason="needs the openssl command"),
]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("up_tls") / "repo"
    make_add_sub(root)
    return root


@pytest.fixture(scope="module")
def up(repo: Path, certs: Certificates) -> Iterator[UpProcess]:
    server = UpProcess(
        repo, *light_args(repo), "--grpc-use-ssl-mutual=true",
        "--grpc-server-cert", str(certs.server_cert), "--grpc-server-key", str(certs.server_key),
        "--grpc-root-cert", str(certs.ca_cert),
    )  # fmt: skip
    yield server
    server.stop()


def test_a_tls_call_with_a_client_certificate_wakes_the_model_from_zero(
    up: UpProcess, certs: Certificates
) -> None:
    assert "(TLS, client certificates required)" in up.log()
    np.testing.assert_array_equal(add_sub_over(up.grpc_address, **with_client_cert(certs)), 3)


@pytest.mark.parametrize("client", ["plaintext", "no certificate"])
def test_the_front_door_refuses_a_client_without_tls_or_a_certificate(
    up: UpProcess, certs: Certificates, client: str
) -> None:
    options = {} if client == "plaintext" else trusting(certs)
    assert refusal_of(up.grpc_address, **options) == "StatusCode.UNAVAILABLE"


def test_mutual_tls_without_a_root_certificate_stops_the_start(
    repo: Path, certs: Certificates
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "thaw.cli", "up", str(repo), "--port", "0",
         *light_args(repo), "--grpc-use-ssl-mutual=true",
         "--grpc-server-cert", str(certs.server_cert),
         "--grpc-server-key", str(certs.server_key)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "--grpc-use-ssl-mutual needs --grpc-root-cert" in proc.stderr


def test_the_front_door_serves_a_renewed_certificate_without_a_restart(
    repo: Path, certs: Certificates, tmp_path: Path
) -> None:
    live, renewed = renewable(tmp_path, certs)
    server = UpProcess(repo, *light_args(repo), *live_files(live))
    try:
        log = server.log_path.read_text
        serves_a_renewal(server.grpc_address, live, certs, renewed, lambda: log(errors="replace"))
    finally:
        server.stop()
