"""tritonclient.grpc over TLS, as a Triton user calls it: one add_sub inference with the client's
choice of credentials, and the status a refused connection ends in."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.tls_certs import Certificates, make_certificates

__all__ = [
    "add_sub_over",
    "live_files",
    "refusal_of",
    "renew",
    "renewable",
    "serves_a_renewal",
    "trusting",
    "with_client_cert",
]


def trusting(certs: Certificates) -> dict[str, Any]:
    """A TLS client that trusts the test CA and presents no certificate."""
    return {"ssl": True, "root_certificates": str(certs.ca_cert)}


def with_client_cert(certs: Certificates, *, stranger: bool = False) -> dict[str, Any]:
    """A TLS client presenting the CA's client certificate (or one another CA signed)."""
    cert, key = (certs.client_cert, certs.client_key)
    if stranger:
        cert, key = (certs.stranger_cert, certs.stranger_key)
    return {**trusting(certs), "private_key": str(key), "certificate_chain": str(cert)}


def add_sub_over(address: str, *, timeout_s: float = 60.0, **client: Any) -> np.ndarray:
    """OUTPUT0 of add_sub(1, 2) (four FP32) through a client made with `client`'s options."""
    with grpcclient.InferenceServerClient(address, **client) as conn:
        inputs = [grpcclient.InferInput(f"INPUT{i}", [4], "FP32") for i in (0, 1)]
        inputs[0].set_data_from_numpy(np.ones(4, np.float32))
        inputs[1].set_data_from_numpy(np.full(4, 2, np.float32))
        result = conn.infer("add_sub", inputs, client_timeout=timeout_s)
        output: np.ndarray = result.as_numpy("OUTPUT0")
        return output


def refusal_of(address: str, **client: Any) -> str:
    """The status a client with `client`'s options ends in (its liveness call must fail)."""
    try:
        with grpcclient.InferenceServerClient(address, **client) as conn:
            conn.is_server_live(client_timeout=10)
    except InferenceServerException as exc:
        return str(exc.status())
    raise AssertionError(f"{client} was served")


def renew(live: Path, certs: Certificates) -> None:
    """Put `certs`' server certificate, key and CA in `live` (server_cert, server_key,
    ca_cert) as a renewal does: each file staged beside and renamed over the old one."""
    for name in ("server_cert", "server_key", "ca_cert"):
        staged = live / f".{name}.new"
        staged.write_bytes(certs.read(name))
        staged.replace(live / name)


def serves_a_renewal(
    address: str, live: Path, certs: Certificates, renewed: Certificates, log: Callable[[], str]
) -> None:
    """The server at `address`, started on `live`'s files (`certs`' chain), serves `renewed`'s
    to a new connection once they replace them, and no longer `certs`', and logs the reload."""
    np.testing.assert_array_equal(add_sub_over(address, **with_client_cert(certs)), 3)
    renew(live, renewed)
    np.testing.assert_array_equal(add_sub_over(address, **with_client_cert(renewed)), 3)
    assert refusal_of(address, **with_client_cert(certs)) == "StatusCode.UNAVAILABLE"
    assert "gRPC TLS: certificate reloaded" in log()


def renewable(folder: Path, certs: Certificates) -> tuple[Path, Certificates]:
    """`certs`' server files copied into `folder/live` (what a server is started on and a
    renewal rewrites), and a renewal: certificates of another CA, which tells the two apart."""
    live = folder / "live"
    live.mkdir()
    renew(live, certs)
    return live, make_certificates(folder / "renewed")


def live_files(live: Path) -> tuple[str, ...]:
    """The TLS flags for the files of `live` (mutual TLS, its ca_cert the root)."""
    return (
        "--grpc-use-ssl-mutual=true",
        *("--grpc-server-cert", str(live / "server_cert")),
        *("--grpc-server-key", str(live / "server_key")),
        *("--grpc-root-cert", str(live / "ca_cert")),
    )
