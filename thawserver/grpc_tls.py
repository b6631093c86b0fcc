"""tritonserver's gRPC TLS flags, for both CLIs: their files read and checked at start, and
again whenever they change (a renewal).

    add_tls_arguments(parser, where=...)  --grpc-use-ssl, --grpc-use-ssl-mutual,
                                          --grpc-server-cert, --grpc-server-key, --grpc-root-cert
    tls_from_args(args) -> GrpcTls | None the files read and checked (None: plaintext);
                                          ValueError names the flag and what is wrong
    server_credentials(tls)               the grpc server credentials of a GrpcTls

As tritonserver reads them: `--grpc-use-ssl-mutual`, given at all, turns TLS on (Triton's
parser sets `use_ssl` with it, whatever its value) and, when true, requires every client to
present a certificate signed by `--grpc-root-cert`. The certificate and key files are ignored
unless TLS is on. Where tritonserver reads a missing file as empty and fails later in gRPC's bind
("failed to start GRPC service"), Thaw refuses to start naming the flag, the file and why:
missing, unreadable, not PEM, a key that does not match the certificate or is encrypted, and
`--grpc-use-ssl-mutual` without `--grpc-root-cert`. The checks use the standard library's
`ssl` (the OpenSSL gRPC's own BoringSSL agrees with on PEM), so nothing is added to the install.

Renewed certificates are taken without a restart (tritonserver reads its files once): grpc asks
`CertificateReloader.fetch` before each new connection's handshake; when a file's identity
(inode, size, mtime) changed, the three files are read and checked again as at start, and new
connections get them; connections already open keep theirs. A file caught half-written, or a
renewal that fails a check, keeps the certificate in use and is logged once per change (a
warning naming the file and why); the next change is tried again. cert-manager's and the
kubelet's Secret volumes replace the files by a symlink swap, which this sees.
"""

from __future__ import annotations

import argparse
import logging
import os
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thawserver.bool_flag import triton_bool

__all__ = [
    "CertificateReloader",
    "GrpcTls",
    "TlsFiles",
    "add_tls_arguments",
    "server_credentials",
    "tls_from_args",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TlsFiles:
    """Where a GrpcTls was read from (what a renewal rewrites)."""

    server_cert: Path
    server_key: Path
    root_cert: Path | None = None


@dataclass(frozen=True)
class GrpcTls:
    """A gRPC listener's TLS: PEM bytes, read and checked at start (`tls_from_args`).

    `mutual`: every client must present a certificate that `root_cert` (a CA bundle) signs;
    otherwise `root_cert` is not used. `server_cert` may be a chain (leaf first)."""

    server_cert: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    root_cert: bytes | None = field(default=None, repr=False)
    mutual: bool = False
    # Its files, read again when they change (None: the bytes above for good)
    files: TlsFiles | None = None


def add_tls_arguments(parser: argparse._ActionsContainer, *, where: str, note: str = "") -> None:
    """The five flags on `parser`; `where` names the listener they secure and `note` (a
    sentence) says more about it, for the help."""
    parser.add_argument(
        "--grpc-use-ssl", type=triton_bool, default=False, metavar="BOOL",
        help=f"serve {where} over TLS (default false): needs --grpc-server-cert and "
        f"--grpc-server-key{note and '. ' + note}",
    )  # fmt: skip
    parser.add_argument(
        "--grpc-use-ssl-mutual", type=triton_bool, default=None, metavar="BOOL",
        help="given at all, TLS is on (as tritonserver reads it); true: clients must present "
        "a certificate signed by --grpc-root-cert (mutual TLS)",
    )  # fmt: skip
    parser.add_argument(
        "--grpc-server-cert", type=Path, default=None, metavar="FILE",
        help="PEM certificate (chain) of the gRPC server; ignored unless TLS is on. A renewed "
        "certificate, key or root is read again when its file changes: new connections get it",
    )  # fmt: skip
    parser.add_argument(
        "--grpc-server-key", type=Path, default=None, metavar="FILE",
        help="PEM private key (unencrypted) of --grpc-server-cert; ignored unless TLS is on",
    )  # fmt: skip
    parser.add_argument(
        "--grpc-root-cert", type=Path, default=None, metavar="FILE",
        help="PEM certificate(s) of the CA that signs client certificates; with "
        "--grpc-use-ssl-mutual",
    )  # fmt: skip


def tls_from_args(args: argparse.Namespace) -> GrpcTls | None:
    """The TLS the flags ask for, its files read and checked; None when TLS is off.
    ValueError ("--grpc-server-key FILE: why") when a file is missing or not what it must be."""
    mutual_flag: bool | None = args.grpc_use_ssl_mutual
    if not args.grpc_use_ssl and mutual_flag is None:
        return None
    mutual = bool(mutual_flag)
    on = "--grpc-use-ssl-mutual" if mutual_flag is not None else "--grpc-use-ssl"
    for flag, path in (("--grpc-server-cert", args.grpc_server_cert),
                       ("--grpc-server-key", args.grpc_server_key)):  # fmt: skip
        if path is None:
            raise ValueError(f"{on} needs {flag} (a PEM file)")
    if mutual and args.grpc_root_cert is None:
        raise ValueError(
            "--grpc-use-ssl-mutual needs --grpc-root-cert (the PEM certificate of the CA that "
            "signs client certificates)"
        )
    files = TlsFiles(args.grpc_server_cert, args.grpc_server_key, args.grpc_root_cert)
    return _load(files, mutual)


def _load(files: TlsFiles, mutual: bool) -> GrpcTls:
    """The files read and checked; ValueError names the flag, the file and why."""
    cert = _read("--grpc-server-cert", files.server_cert)
    key = _read("--grpc-server-key", files.server_key)
    _check_certificates("--grpc-server-cert", files.server_cert, cert)
    _check_key(files.server_cert, files.server_key)
    root: bytes | None = None
    if files.root_cert is not None:
        root = _read("--grpc-root-cert", files.root_cert)
        _check_certificates("--grpc-root-cert", files.root_cert, root)
    return GrpcTls(server_cert=cert, server_key=key, root_cert=root, mutual=mutual, files=files)


def server_credentials(tls: GrpcTls) -> Any:
    """grpc's `ServerCredentials` for `tls` (grpcio ships no type information): reloaded from
    its files when they change (`CertificateReloader`), when it has files."""
    import grpc  # only the servers that listen for gRPC import it

    if tls.files is None:
        return grpc.ssl_server_credentials(
            [(tls.server_key, tls.server_cert)],
            root_certificates=tls.root_cert if tls.mutual else None,
            require_client_auth=tls.mutual,
        )
    return grpc.dynamic_ssl_server_credentials(
        _configuration(tls),
        CertificateReloader(tls).fetch,
        require_client_authentication=tls.mutual,
    )


def _configuration(tls: GrpcTls) -> Any:
    import grpc

    return grpc.ssl_server_certificate_configuration(
        [(tls.server_key, tls.server_cert)], root_certificates=tls.root_cert if tls.mutual else None
    )


_Identity = tuple[tuple[int, int, int] | None, ...]


class CertificateReloader:
    """grpc's certificate-configuration fetcher for one listener: None (keep the current
    certificate) unless its files changed since they were last read, then the new
    configuration, or None and one warning when the new files fail a check.

    grpc calls `fetch` from its own threads, before each new connection's handshake: it stats
    the files and reads nothing else until they change, and it never raises."""

    def __init__(self, tls: GrpcTls, *, configure: Any = _configuration) -> None:
        if tls.files is None:
            raise ValueError("a GrpcTls read from files is needed to reload it")
        self._files = tls.files
        self._mutual = tls.mutual
        self._configure = configure
        self._lock = threading.Lock()
        self._seen = self._identity()  # what the certificate in use was read from
        self.reloads = 0  # renewals taken (for tests and the log)

    def _identity(self) -> _Identity:
        paths = (self._files.server_cert, self._files.server_key, self._files.root_cert)
        return tuple(_stat(path) for path in paths)

    def fetch(self) -> Any:
        """A new certificate configuration, or None to keep the one in use."""
        try:
            identity = self._identity()
            if identity == self._seen:
                return None
            with self._lock:  # one reload at a time; the others keep the current one
                if identity == self._seen:
                    return None
                self._seen = identity  # tried once per change, good or bad
                try:
                    tls = _load(self._files, self._mutual)
                except ValueError as exc:
                    logger.warning("gRPC TLS: a changed certificate file was not taken, the "
                                   "certificate in use is kept: %s", exc)  # fmt: skip
                    return None
                self.reloads += 1
                logger.info("gRPC TLS: certificate reloaded from %s (new connections use it)",
                            self._files.server_cert)  # fmt: skip
                return self._configure(tls)
        except Exception:  # grpc must never see an exception from its fetcher
            logger.exception("gRPC TLS: checking the certificate files failed; kept the old one")
            return None


def _stat(path: Path | None) -> tuple[int, int, int] | None:
    """A file's identity (inode, size, mtime in ns) through symlinks; None when it is absent."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _read(flag: str, path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{flag} {path}: cannot read it: {exc.strerror or exc}") from None
    if not data.strip():
        raise ValueError(f"{flag} {path}: the file is empty")
    return data


def _check_certificates(flag: str, path: Path, pem: bytes) -> None:
    """At least one PEM certificate in `pem`, and nothing OpenSSL cannot parse."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_verify_locations(cadata=pem.decode("ascii"))
    except UnicodeDecodeError:
        raise ValueError(f"{flag} {path}: not a PEM certificate (binary data)") from None
    except ssl.SSLError:
        raise ValueError(f"{flag} {path}: not a PEM certificate") from None


def _check_key(cert_path: Path, key_path: Path) -> None:
    """The key file is a PEM private key, unencrypted, of the certificate's public key."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        # A password callback that refuses: an encrypted key fails here instead of prompting
        # on the terminal (gRPC cannot use one either).
        context.load_cert_chain(cert_path, key_path, password=_no_password)
    except _EncryptedKey:
        raise ValueError(
            f"--grpc-server-key {key_path}: the key is encrypted; gRPC needs it unencrypted"
        ) from None
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc):
            raise ValueError(
                f"--grpc-server-key {key_path}: not the key of --grpc-server-cert {cert_path}"
            ) from None
        raise ValueError(f"--grpc-server-key {key_path}: not a PEM private key") from None
    except OSError as exc:
        raise ValueError(f"--grpc-server-key {key_path}: cannot read it: {exc}") from None


class _EncryptedKey(Exception):
    """Raised by the password callback: the key asks for a passphrase."""


def _no_password() -> bytes:
    raise _EncryptedKey
