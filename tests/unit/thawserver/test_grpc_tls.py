"""tritonserver's gRPC TLS flags: what turns TLS on, and every refusal names the flag, the file
and why, before the server listens."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.tls_certs import Certificates, make_certificates, openssl_available
from thawserver.grpc_tls import (
    CertificateReloader,
    GrpcTls,
    add_tls_arguments,
    server_credentials,
    tls_from_args,
)

pytestmark = pytest.mark.skipif(not openssl_available(), reason="needs the openssl command")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


def _tls(*argv: str | Path) -> GrpcTls | None:
    parser = argparse.ArgumentParser()
    add_tls_arguments(parser, where="the gRPC port")
    return tls_from_args(parser.parse_args([str(a) for a in argv]))


def _refusal(*argv: str | Path) -> str:
    with pytest.raises(ValueError) as info:
        _tls(*argv)
    return str(info.value)


def _server(certs: Certificates) -> tuple[str | Path, ...]:
    return ("--grpc-server-cert", certs.server_cert, "--grpc-server-key", certs.server_key)


def test_without_the_flags_grpc_is_plaintext_and_the_files_are_not_read(
    certs: Certificates, tmp_path: Path
) -> None:
    assert _tls() is None
    assert _tls("--grpc-use-ssl=false", "--grpc-server-cert", tmp_path / "absent") is None


def test_use_ssl_reads_the_pair_and_asks_no_client_certificate(certs: Certificates) -> None:
    tls = _tls("--grpc-use-ssl=true", *_server(certs))
    assert tls is not None and not tls.mutual
    assert tls.server_cert == certs.read("server_cert")
    assert tls.server_key == certs.read("server_key")
    assert "BEGIN" not in repr(tls)  # the key never reaches a log line
    assert server_credentials(tls) is not None


def test_use_ssl_mutual_given_at_all_turns_tls_on_as_tritonserver_reads_it(
    certs: Certificates,
) -> None:
    tls = _tls("--grpc-use-ssl-mutual=false", *_server(certs))
    assert tls is not None and not tls.mutual
    tls = _tls("--grpc-use-ssl-mutual=1", *_server(certs), "--grpc-root-cert", certs.ca_cert)
    assert tls is not None and tls.mutual and tls.root_cert == certs.read("ca_cert")
    assert server_credentials(tls) is not None


def test_tls_without_its_files_is_refused_naming_the_missing_flag(certs: Certificates) -> None:
    assert _refusal("--grpc-use-ssl=1") == "--grpc-use-ssl needs --grpc-server-cert (a PEM file)"
    refused = _refusal("--grpc-use-ssl=1", "--grpc-server-cert", certs.server_cert)
    assert refused == "--grpc-use-ssl needs --grpc-server-key (a PEM file)"
    assert _refusal("--grpc-use-ssl-mutual=true", *_server(certs)).startswith(
        "--grpc-use-ssl-mutual needs --grpc-root-cert"
    )


def test_a_file_that_cannot_be_read_is_refused_with_the_systems_words(
    certs: Certificates, tmp_path: Path
) -> None:
    absent = tmp_path / "absent.crt"
    refused = _refusal("--grpc-use-ssl=1", "--grpc-server-cert", absent,
                       "--grpc-server-key", certs.server_key)  # fmt: skip
    assert refused == f"--grpc-server-cert {absent}: cannot read it: No such file or directory"
    empty = tmp_path / "empty.key"
    empty.write_bytes(b"\n")
    refused = _refusal("--grpc-use-ssl=1", "--grpc-server-cert", certs.server_cert,
                       "--grpc-server-key", empty)  # fmt: skip
    assert refused == f"--grpc-server-key {empty}: the file is empty"


def test_files_that_are_not_what_the_flag_needs_are_refused(
    certs: Certificates, tmp_path: Path
) -> None:
    cert, key = certs.server_cert, certs.server_key
    as_cert = _refusal("--grpc-use-ssl=1", "--grpc-server-cert", key, "--grpc-server-key", key)
    assert as_cert == f"--grpc-server-cert {key}: not a PEM certificate"
    as_key = _refusal("--grpc-use-ssl=1", "--grpc-server-cert", cert, "--grpc-server-key", cert)
    assert as_key == f"--grpc-server-key {cert}: not a PEM private key"
    other = _refusal("--grpc-use-ssl=1", "--grpc-server-cert", cert,
                     "--grpc-server-key", certs.client_key)  # fmt: skip
    mismatch = f"--grpc-server-key {certs.client_key}: not the key of --grpc-server-cert {cert}"
    assert other == mismatch
    der = tmp_path / "root.der"
    subprocess.run(["openssl", "x509", "-in", str(certs.ca_cert), "-outform", "DER",
                    "-out", str(der)], check=True, capture_output=True)  # fmt: skip
    refused = _refusal("--grpc-use-ssl-mutual=1", *_server(certs), "--grpc-root-cert", der)
    assert refused == f"--grpc-root-cert {der}: not a PEM certificate (binary data)"


def test_an_encrypted_key_is_refused_instead_of_prompting(
    certs: Certificates, tmp_path: Path
) -> None:
    locked = tmp_path / "locked.key"
    subprocess.run(["openssl", "pkcs8", "-topk8", "-in", str(certs.server_key),
                    "-out", str(locked), "-passout", "pass:1234"],
                   check=True, capture_output=True)  # fmt: skip
    refused = _refusal("--grpc-use-ssl=1", "--grpc-server-cert", certs.server_cert,
                       "--grpc-server-key", locked)  # fmt: skip
    assert refused == f"--grpc-server-key {locked}: the key is encrypted; gRPC needs it unencrypted"


# -- renewal without a restart ---------------------------------------------------------------


def _renewable(tmp_path: Path, certs: Certificates) -> tuple[GrpcTls, Path]:
    """TLS read from copies of the test certificates in `tmp_path/live` (the files a renewal
    rewrites), with mutual TLS so that the root is watched too."""
    live = tmp_path / "live"
    live.mkdir()
    for name in ("server_cert", "server_key", "ca_cert"):
        (live / name).write_bytes(certs.read(name))
    return _mutual_from(live), live


def _mutual_from(folder: Path) -> GrpcTls:
    tls = _tls(
        "--grpc-use-ssl-mutual=true",
        *("--grpc-server-cert", folder / "server_cert", "--grpc-server-key", folder / "server_key"),
        *("--grpc-root-cert", folder / "ca_cert"),
    )
    assert tls is not None
    return tls


def _reloader(tls: GrpcTls) -> tuple[CertificateReloader, list[GrpcTls]]:
    taken: list[GrpcTls] = []

    def configure(new: GrpcTls) -> str:
        taken.append(new)
        return "configuration"

    return CertificateReloader(tls, configure=configure), taken


def _renew(live: Path, renewed: Certificates) -> None:
    """A renewal as cert-manager writes one: each file replaced whole (a new inode)."""
    for name in ("server_cert", "server_key", "ca_cert"):
        staged = live / f".{name}.new"
        staged.write_bytes(renewed.read(name))
        staged.replace(live / name)


@pytest.fixture(scope="module")
def renewed(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("renewed"))


def test_files_that_did_not_change_are_not_read_again(certs: Certificates, tmp_path: Path) -> None:
    tls, _ = _renewable(tmp_path, certs)
    reloader, taken = _reloader(tls)
    assert [reloader.fetch() for _ in range(3)] == [None, None, None]
    assert taken == [] and reloader.reloads == 0


def test_renewed_files_are_taken_once(
    certs: Certificates, renewed: Certificates, tmp_path: Path
) -> None:
    tls, live = _renewable(tmp_path, certs)
    reloader, taken = _reloader(tls)
    _renew(live, renewed)
    assert reloader.fetch() == "configuration"
    assert reloader.fetch() is None  # taken: not read again
    [new] = taken
    assert new.server_cert == renewed.read("server_cert")
    assert new.server_key == renewed.read("server_key")
    assert new.root_cert == renewed.read("ca_cert") and new.mutual


def test_a_half_written_renewal_keeps_the_certificate_in_use_and_warns_once(
    certs: Certificates, renewed: Certificates, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tls, live = _renewable(tmp_path, certs)
    reloader, taken = _reloader(tls)
    (live / "server_key").write_bytes(renewed.read("server_key"))  # the key before its cert
    assert reloader.fetch() is None and reloader.fetch() is None
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    assert "not the key of --grpc-server-cert" in warnings[0] and "kept" in warnings[0]
    (live / "server_cert").write_bytes(renewed.read("server_cert"))
    (live / "ca_cert").write_bytes(renewed.read("ca_cert"))
    assert reloader.fetch() == "configuration"  # the renewal completed: taken
    assert taken[0].server_cert == renewed.read("server_cert")


def test_a_file_removed_in_a_rotation_keeps_the_certificate_in_use(
    certs: Certificates, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tls, live = _renewable(tmp_path, certs)
    reloader, taken = _reloader(tls)
    (live / "server_cert").unlink()
    assert reloader.fetch() is None and taken == []
    assert any("cannot read it" in r.getMessage() for r in caplog.records)


def test_a_secret_volumes_symlink_swap_is_seen(
    certs: Certificates, renewed: Certificates, tmp_path: Path
) -> None:
    # The kubelet's layout: each file a symlink through `..data`, itself a symlink to a
    # timestamped directory; a renewal writes a new directory and swaps `..data`.
    volume = tmp_path / "volume"
    volume.mkdir()
    for version, source in (("v1", certs), ("v2", renewed)):
        (volume / version).mkdir()
        for name in ("server_cert", "server_key", "ca_cert"):
            (volume / version / name).write_bytes(source.read(name))
    (volume / "..data").symlink_to("v1")
    for name in ("server_cert", "server_key", "ca_cert"):
        (volume / name).symlink_to(f"..data/{name}")
    reloader, taken = _reloader(_mutual_from(volume))
    assert reloader.fetch() is None
    (volume / "..data_tmp").symlink_to("v2")
    (volume / "..data_tmp").replace(volume / "..data")
    assert reloader.fetch() == "configuration"
    assert taken[0].server_cert == renewed.read("server_cert")


def test_grpc_takes_the_reloaders_configuration(certs: Certificates, tmp_path: Path) -> None:
    tls, _ = _renewable(tmp_path, certs)
    assert tls.files is not None
    assert server_credentials(tls) is not None  # dynamic credentials, grpc's own check


@pytest.mark.parametrize(
    "garbage", [b"\x00\xff" * 64, b"-----BEGIN CERTIFICATE-----\nnope\n", b" "]
)
def test_a_renewal_that_is_not_a_certificate_keeps_the_one_in_use(
    certs: Certificates, tmp_path: Path, caplog: pytest.LogCaptureFixture, garbage: bytes
) -> None:
    tls, live = _renewable(tmp_path, certs)
    reloader, taken = _reloader(tls)
    (live / "server_cert").write_bytes(garbage)
    assert reloader.fetch() is None and taken == []
    [warning] = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "--grpc-server-cert" in warning and "kept" in warning
