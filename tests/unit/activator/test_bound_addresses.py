"""`thaw up`'s bound addresses: binding returns where it listens (ports 0 resolved, wildcard
hosts as loopback for replicas) and leaves the frozen config as it was given."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from activator.config import ActivatorConfig, BoundAddresses
from activator.process import serving

# Imported here, not on the event loop (serving imports it lazily, a blocking read in a test).
from activator.surfaces import grpc_surface  # noqa: F401


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
async def test_binding_returns_the_real_ports_and_how_replicas_reach_them(
    tmp_path: Path, host: str
) -> None:
    config = ActivatorConfig(repository=tmp_path, host=host, port=0, grpc_port=0)
    listener, grpc_bound, bound = serving._bind(config)
    try:
        assert grpc_bound is not None
        http_port = listener.getsockname()[1]
        grpc_port = int(grpc_bound[1].rsplit(":", 1)[1])
        assert http_port != 0 and grpc_port != 0
        assert bound == BoundAddresses(
            http_port=http_port,
            grpc_port=grpc_port,
            front_door_url=f"http://127.0.0.1:{http_port}",  # a wildcard is loopback to them
            front_door_grpc=f"127.0.0.1:{grpc_port}",
        )
        assert config.port == 0 and config.grpc_port == 0  # the config is not rewritten
    finally:
        listener.close()
        if grpc_bound is not None:
            await grpc_bound[0].stop(0)


async def test_without_a_grpc_port_replicas_get_no_grpc_front_door(tmp_path: Path) -> None:
    port = _free_port()
    config = ActivatorConfig(repository=tmp_path, port=port, grpc_port=None)
    listener, grpc_bound, bound = serving._bind(config)
    try:
        assert grpc_bound is None
        assert bound == BoundAddresses(port, None, front_door_url=f"http://127.0.0.1:{port}")
    finally:
        listener.close()


async def test_a_grpc_port_taken_closes_the_listener_and_names_the_address(
    tmp_path: Path,
) -> None:
    http_port = _free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        config = ActivatorConfig(repository=tmp_path, port=http_port, grpc_port=busy)
        with pytest.raises(serving.ListenError, match=str(busy)):
            serving._bind(config)
    with socket.create_server(("127.0.0.1", http_port)):  # the HTTP listener was closed
        pass


@pytest.mark.skipif(not hasattr(socket, "SO_REUSEPORT"), reason="no SO_REUSEPORT here")
async def test_with_reuse_flags_a_second_thaw_up_binds_the_same_ports(tmp_path: Path) -> None:
    """`--reuse-http-port`/`--reuse-grpc-port`: both front doors shared; without them, the
    second start is refused in the system's words."""
    http_port, grpc_port = _free_port(), _free_port()
    shared = ActivatorConfig(
        repository=tmp_path, port=http_port, grpc_port=grpc_port, reuse_http_port=True,
        reuse_grpc_port=True,
    )  # fmt: skip
    first = serving._bind(shared)
    try:
        second = serving._bind(shared)
        try:
            assert second[2] == first[2]  # the same ports, bound twice
        finally:
            second[0].close()
            assert second[1] is not None
            await second[1][0].stop(0)
        for reuse_http_port, where in (
            (False, f"{http_port}"),
            (True, f"gRPC on 127.0.0.1:{grpc_port}"),
        ):
            alone = ActivatorConfig(
                repository=tmp_path, port=http_port, grpc_port=grpc_port,
                reuse_http_port=reuse_http_port,
            )  # fmt: skip
            with pytest.raises(serving.ListenError, match=f"{where}: Address already in use"):
                serving._bind(alone)
    finally:
        first[0].close()
        assert first[1] is not None
        await first[1][0].stop(0)
