"""thawserver.grpc_bind: why a port cannot be listened on, in the system's words."""

from __future__ import annotations

import socket

import pytest

from thawserver.grpc_bind import bind_problem

needs_reuseport = pytest.mark.skipif(
    not hasattr(socket, "SO_REUSEPORT"), reason="this system has no SO_REUSEPORT"
)


def test_a_port_someone_listens_on_is_in_use() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert bind_problem("127.0.0.1", port) == "Address already in use"


def test_a_free_port_and_port_0_have_no_problem() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert bind_problem("127.0.0.1", port) is None  # closed again: free
    assert bind_problem("127.0.0.1", 0) is None


def test_an_address_not_on_this_machine_cannot_be_bound() -> None:
    assert bind_problem("192.0.2.1", 8001) == "Cannot assign requested address"  # TEST-NET-1


@needs_reuseport
def test_with_reuse_a_port_other_reusing_servers_hold_is_free() -> None:
    """`--reuse-grpc-port`: grpc binds with SO_REUSEPORT, and so does the check before it."""
    with socket.socket() as shared:
        shared.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        shared.bind(("127.0.0.1", 0))
        shared.listen()
        port = shared.getsockname()[1]
        assert bind_problem("127.0.0.1", port, reuse_port=True) is None
        assert bind_problem("127.0.0.1", port) == "Address already in use"


@needs_reuseport
def test_with_reuse_a_port_held_without_it_is_still_in_use() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert bind_problem("127.0.0.1", port, reuse_port=True) == "Address already in use"
