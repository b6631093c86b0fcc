"""A dead replica's direct connections: slot allocation, the outcome of each state byte, and
the death walk over real TCP connections (the activator's copies and their clients)."""

from __future__ import annotations

import asyncio
import json
import mmap
import os
import socket
from pathlib import Path

import pytest

from activator.direct.handoff import HandoffLink, SlotTable
from activator.direct.orphans import Outcome, bad_gateway, outcome, settle
from tests.fakes.fallback import FakeDoor
from tests.fakes.loop import HUNG_AFTER_S, eventually


def test_slots_go_round_robin_and_never_to_an_open_connection() -> None:
    table = SlotTable(4)
    taken = []
    for _ in range(4):
        slot = table.allocate()
        assert slot is not None
        table.open[slot] = object()  # type: ignore[assignment]
        taken.append(slot)
    assert taken == [0, 1, 2, 3]
    assert table.allocate() is None  # every slot open: no handoff
    del table.open[2]
    assert table.allocate() == 2  # the one free slot, though the round is at 0
    table.open[2] = object()  # type: ignore[assignment]
    del table.open[0], table.open[3]
    assert [table.allocate(), table.allocate()] == [3, 0]  # onwards from the last, wrapping


@pytest.mark.parametrize(
    ("state", "expected"),
    [(0, Outcome.TAKEN_BACK), (1, Outcome.BAD_GATEWAY), (2, Outcome.ABORTED), (7, Outcome.ABORTED)],
)
def test_each_state_byte_has_one_outcome(state: int, expected: Outcome) -> None:
    assert outcome(state) is expected


def test_the_502_is_a_complete_json_response_that_closes() -> None:
    head, _, body = bad_gateway("m-3", "m").partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 502 Bad Gateway"
    headers = dict(line.split(": ", 1) for line in lines[1:])
    assert headers["Content-Type"] == "application/json"
    assert headers["Connection"] == "close"
    assert int(headers["Content-Length"]) == len(body)
    assert json.loads(body) == {"error": "replica m-3 of model 'm' died while handling the request"}


def _tcp_pair(listener: socket.socket) -> tuple[socket.socket, socket.socket]:
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    server.setblocking(False)
    return client, server


def _write_states(path: Path, states: bytes) -> None:
    """What the replica writes into its state file (mapped, like it does)."""
    with open(path, "r+b") as file, mmap.mmap(file.fileno(), 0) as mapped:
        mapped[: len(states)] = states


async def _read_all(client: socket.socket) -> bytes:
    def read() -> bytes:
        client.settimeout(HUNG_AFTER_S)  # until the activator closes: after its linger
        data = b""
        while chunk := client.recv(65536):
            data += chunk
        return data

    return await asyncio.to_thread(read)


async def test_a_dead_replicas_connections_are_settled_by_their_state(tmp_path: Path) -> None:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(tmp_path / "replica.sock"))
    server.listen()
    state_file = tmp_path / "replica.state"
    state_file.write_bytes(bytes(16))
    link = HandoffLink(tmp_path / "replica.sock", "m-1", model="m", state_path=state_file)
    await link.connect(timeout_s=HUNG_AFTER_S)
    replica_end, _ = server.accept()
    listener = socket.create_server(("127.0.0.1", 0))
    door = FakeDoor()
    pairs = [_tcp_pair(listener) for _ in range(4)]
    for _, copy in pairs:
        assert link.send(copy, door)
    for _ in pairs:  # the replica takes them (and closes nothing: it is about to die)
        _, fds, _, _ = socket.recv_fds(replica_end, 4, 4)
        os.close(fds[0])
    _write_states(state_file, bytes([1, 2, 0, 1]))  # mid-request, -response, idle, -request
    (asked, _), (streaming, _), (_, idle_copy), (uploading, _) = pairs
    uploading.sendall(b"x" * 100_000)  # body the replica never read: lingered over, not reset
    replica_end.close()
    server.close()
    await eventually(lambda: link.lost.is_set())
    outcomes = link.replica_died()
    assert outcomes == {Outcome.BAD_GATEWAY: 2, Outcome.ABORTED: 1, Outcome.TAKEN_BACK: 1}
    assert link.replica_died() == {}  # once only
    assert link.connections == 0
    for client in (asked, uploading):
        data = await _read_all(client)
        assert data.startswith(b"HTTP/1.1 502 Bad Gateway\r\n")
        assert json.loads(data.partition(b"\r\n\r\n")[2])["error"].startswith("replica m-1")
    with pytest.raises(ConnectionResetError):
        await _read_all(streaming)  # reset: never a body that looks complete
    assert door.taken_back == [idle_copy] and idle_copy.fileno() != -1  # served here next
    assert sorted(door.counts) == sorted(
        [("m", Outcome.BAD_GATEWAY)] * 2 + [("m", Outcome.ABORTED), ("m", Outcome.TAKEN_BACK)]
    )
    for client, _ in pairs:
        client.close()  # the lingering 502 connections see the clients go, and close
    await asyncio.wait_for(link.close(), HUNG_AFTER_S)
    idle_copy.close()
    listener.close()


async def test_a_502_to_a_client_that_is_gone_is_just_closed() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    client, copy = _tcp_pair(listener)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    client.close()  # reset
    await asyncio.sleep(0.05)
    await asyncio.wait_for(settle(copy, bad_gateway("m-1", "m"), linger_s=1), HUNG_AFTER_S)
    assert copy.fileno() == -1
    listener.close()
