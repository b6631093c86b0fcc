"""tritonserver's gRPC TLS flags, for both CLIs: their values read and checked once, at start.

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
"""

from __future__ import annotations

import argparse
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thawserver.bool_flag import triton_bool

__all__ = ["GrpcTls", "add_tls_arguments", "server_credentials", "tls_from_args"]


@dataclass(frozen=True)
class GrpcTls:
    """A gRPC listener's TLS: PEM bytes, read and checked at start (`tls_from_args`).

    `mutual`: every client must present a certificate that `root_cert` (a CA bundle) signs;
    otherwise `root_cert` is not used. `server_cert` may be a chain (leaf first)."""

    server_cert: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    root_cert: bytes | None = field(default=None, repr=False)
    mutual: bool = False


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
        help="PEM certificate (chain) of the gRPC server; ignored unless TLS is on",
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
    cert = _read("--grpc-server-cert", args.grpc_server_cert)
    key = _read("--grpc-server-key", args.grpc_server_key)
    _check_certificates("--grpc-server-cert", args.grpc_server_cert, cert)
    _check_key(args.grpc_server_cert, args.grpc_server_key)
    root: bytes | None = None
    if args.grpc_root_cert is not None:
        root = _read("--grpc-root-cert", args.grpc_root_cert)
        _check_certificates("--grpc-root-cert", args.grpc_root_cert, root)
    return GrpcTls(server_cert=cert, server_key=key, root_cert=root, mutual=mutual)


def server_credentials(tls: GrpcTls) -> Any:
    """grpc's `ServerCredentials` for `tls` (grpcio ships no type information)."""
    import grpc  # only the servers that listen for gRPC import it

    return grpc.ssl_server_credentials(
        [(tls.server_key, tls.server_cert)],
        root_certificates=tls.root_cert if tls.mutual else None,
        require_client_auth=tls.mutual,
    )


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
