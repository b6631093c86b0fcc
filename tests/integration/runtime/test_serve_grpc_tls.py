"""`thaw serve` with tritonserver's TLS flags: tritonclient infers over TLS (and with a client
certificate under mutual TLS); a plaintext client, a client without a certificate and one
another CA vouches for are refused; bad certificate files stop the start, naming the flag; a
renewed certificate is served to new connections without a restart."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.fixtures.models import make_add_sub
from tests.fixtures.serve_process import ServeProcess
from tests.fixtures.tls_certs import Certificates, make_certificates, openssl_available
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
    root = tmp_path_factory.mktemp("tls_repo")
    make_add_sub(root)
    return root


def _server_files(certs: Certificates) -> tuple[str, ...]:
    return ("--grpc-server-cert", str(certs.server_cert),
            "--grpc-server-key", str(certs.server_key))  # fmt: skip


@pytest.fixture(scope="module")
def mutual(repo: Path, certs: Certificates) -> Iterator[ServeProcess]:
    server = ServeProcess(repo, "--grpc-use-ssl-mutual=true", *_server_files(certs),
                          "--grpc-root-cert", str(certs.ca_cert))  # fmt: skip
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def test_tls_serves_a_client_that_trusts_the_ca_and_refuses_plaintext(
    repo: Path, certs: Certificates
) -> None:
    server = ServeProcess(repo, "--grpc-use-ssl=true", *_server_files(certs))
    try:
        server.wait_ready()
        assert "(TLS)" in server.logs()
        np.testing.assert_array_equal(add_sub_over(server.grpc_address, **trusting(certs)), 3)
        assert refusal_of(server.grpc_address) == "StatusCode.UNAVAILABLE"
        # HTTP stays plaintext, as tritonserver's (it has no TLS flags for HTTP)
        with urllib.request.urlopen(server.url + "/v2/health/live", timeout=10) as resp:
            assert resp.status == 200
    finally:
        server.stop()


def test_mutual_tls_serves_a_client_with_a_certificate_the_root_signs(
    mutual: ServeProcess, certs: Certificates
) -> None:
    out = add_sub_over(mutual.grpc_address, **with_client_cert(certs))
    np.testing.assert_array_equal(out, 3)


@pytest.mark.parametrize("client", ["plaintext", "no certificate", "another CA's certificate"])
def test_mutual_tls_refuses_a_client_without_a_certificate_the_root_signs(
    mutual: ServeProcess, certs: Certificates, client: str
) -> None:
    options = {
        "plaintext": {},
        "no certificate": trusting(certs),
        "another CA's certificate": with_client_cert(certs, stranger=True),
    }[client]
    assert refusal_of(mutual.grpc_address, **options) == "StatusCode.UNAVAILABLE"
    # the server is unharmed
    np.testing.assert_array_equal(add_sub_over(mutual.grpc_address, **with_client_cert(certs)), 3)


def test_bad_certificate_files_stop_the_start_naming_the_flag(
    repo: Path, certs: Certificates, tmp_path: Path
) -> None:
    absent = tmp_path / "absent.key"
    for argv, words in (
        (("--grpc-use-ssl=true", "--grpc-server-cert", str(certs.server_cert),
          "--grpc-server-key", str(absent)),
         f"--grpc-server-key {absent}: cannot read it: No such file or directory"),
        (("--grpc-use-ssl-mutual=true", *_server_files(certs)),
         "--grpc-use-ssl-mutual needs --grpc-root-cert"),
        (("--grpc-use-ssl=true", "--grpc-server-cert", str(certs.server_cert),
          "--grpc-server-key", str(certs.client_key)),
         f"--grpc-server-key {certs.client_key}: not the key of --grpc-server-cert"),
    ):  # fmt: skip
        server = ServeProcess(repo, *argv)
        assert server.proc.wait(60) == 2
        server.stop()  # closes the log's writer: read it by path
        log = server.log_path.read_text(errors="replace")
        assert f"thaw serve: error: {words}" in log, log


def test_a_renewed_certificate_is_served_to_new_connections_without_a_restart(
    repo: Path, certs: Certificates, tmp_path: Path
) -> None:
    live, renewed = renewable(tmp_path, certs)
    server = ServeProcess(repo, *live_files(live))
    try:
        server.wait_ready()
        serves_a_renewal(server.grpc_address, live, certs, renewed, server.logs)
    finally:
        server.stop()
