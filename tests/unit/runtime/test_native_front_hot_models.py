"""The Python side of the native front's hot models (decision 0032, phase 2): which versions
the front may answer (hot_row, server_allows), the control socket (FrontControl, against a
socket standing in for the front), how its outcomes are answered and counted, its statistics
added in, and a stub channel moved onto the relay (LoopChannel.splice)."""

from __future__ import annotations

import array
import asyncio
import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from runtime.config import ServeConfig
from runtime.errors import InvalidInput, ServingError
from runtime.http.front_outcome import outcome_error
from runtime.observe.stats import StatsBook
from runtime.process.front_control import FrontCollector, FrontControl
from runtime.process.hot_models import hot_row, server_allows
from runtime.python.loop_channel import LoopChannel
from runtime.python.stub.wire import Message, channel_pair, decode_all, encode, receive, transmit
from thawwire.trace_settings import TraceSetting, TraceSettings, TraceUpdate
from tritonconfig.parse import parse_config

PLAIN = """
name: "m"
backend: "python"
max_batch_size: 4
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]
output [ { name: "Y" data_type: TYPE_STRING dims: [ 1 ] } ]
"""


def _row(text: str = PLAIN, *, instances: int = 2, stubs: int = 2) -> dict[str, Any] | None:
    config = parse_config(text, "config.pbtxt")
    return hot_row("m", "3", config, unversioned=True, instances=instances, stubs=stubs)


def test_a_plain_python_model_in_stubs_is_hot() -> None:
    row = _row()
    assert row is not None
    assert row["model"] == "m" and row["version"] == "3" and row["unversioned"] is True
    assert row["max_batch_size"] == 4
    assert row["inputs"] == [{"name": "X", "datatype": "FP32", "dims": [-1, 3]}]
    assert row["outputs"] == [{"name": "Y", "datatype": "BYTES"}]


@pytest.mark.parametrize(
    "change",
    [
        'backend: "onnxruntime"',
        "model_transaction_policy { decoupled: true }",
        "dynamic_batching { }",
        "sequence_batching { }",
        "response_cache { enable: true }",
        'input [ { name: "S" data_type: TYPE_STRING dims: [ 1 ] } ]',
        'input [ { name: "H" data_type: TYPE_FP16 dims: [ 1 ] } ]',
        'input [ { name: "O" data_type: TYPE_FP32 dims: [ 1 ] optional: true } ]',
        'input [ { name: "R" data_type: TYPE_FP32 dims: [ 2 ] reshape: { shape: [ 1, 2 ] } } ]',
        'output [ { name: "B" data_type: TYPE_BF16 dims: [ 1 ] } ]',
        'output [ { name: "R" data_type: TYPE_FP32 dims: [ 2 ] reshape: { shape: [ 1, 2 ] } } ]',
        "instance_group [ { count: 1 kind: KIND_CPU passive: true } ]",
    ],
)
def test_what_needs_more_than_a_stub_stays_the_servers(change: str) -> None:
    text = PLAIN.replace('backend: "python"', "") if change.startswith("backend") else PLAIN
    assert _row(text + change + "\n") is None


def test_instances_outside_stubs_keep_the_version_the_servers() -> None:
    assert _row(stubs=1) is None  # one instance runs in the server's process
    assert _row(stubs=0, instances=0) is None


def test_server_settings_that_take_every_version_off_the_front() -> None:
    assert server_allows(ServeConfig(repository=Path("r")))
    for change in (
        {"http_header_forward_pattern": "x-.*"},
        {"model_namespacing": True},
        {"rate_limit": "execution_count"},
        {"max_body_bytes": 4096},
        {"http_restricted_apis": ("inference:key=value",)},
    ):
        assert not server_allows(ServeConfig(repository=Path("r"), **change)), change


def test_outcomes_are_answered_and_counted_as_the_server_does() -> None:
    error, answered = outcome_error({"kind": "model_error", "error": "no", "code": 3})
    assert isinstance(error, InvalidInput) and error.from_model and answered  # INVALID_ARG
    error, answered = outcome_error(
        {"kind": "execute_failed", "instance": "m_0_0", "error": "boom"}
    )
    assert error.message == "Failed to process the request(s) for model 'm_0_0', message: boom"
    assert not answered and error.status == 500
    error, answered = outcome_error({"kind": "unhealthy", "instance": "m_0_0"})
    assert "Stub process 'm_0_0' is not healthy." in error.message and not answered
    error, answered = outcome_error({"kind": "not_utf8", "output": "Y"})
    assert isinstance(error, InvalidInput) and answered
    error, answered = outcome_error({"kind": "no_response", "model": "m"})
    assert error.message == "model 'm' sent no response for a request" and not answered
    error, answered = outcome_error({"kind": "rescheduled"})
    assert "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE" in error.message and not answered
    error, answered = outcome_error({"kind": ["what"]})
    assert type(error) is ServingError and not answered


def test_summed_successes_count_as_single_executions() -> None:
    book = StatsBook()
    stats = book.open("m", "1")
    stats.record_summed(2, 3, 3000, 300, (30, 60, 90), 1234)
    doc = stats.to_json("m", "1")
    assert doc["execution_count"] == 3 and doc["inference_count"] == 6
    assert doc["last_inference"] == 1234
    assert doc["inference_stats"]["success"] == {"count": 3, "ns": 3000}
    assert doc["inference_stats"]["compute_infer"] == {"count": 3, "ns": 60}
    assert doc["batch_stats"][0]["batch_size"] == 2
    assert doc["batch_stats"][0]["compute_output"] == {"count": 3, "ns": 90}


def test_trace_settings_tell_their_watchers() -> None:
    settings = TraceSettings(TraceSetting(file="/tmp/t.json"))
    seen: list[bool] = []
    settings.watchers.append(seen.append)
    settings.update(None, TraceUpdate({"level": frozenset({"TIMESTAMPS"})}))
    settings.update(None, TraceUpdate({"level": frozenset()}))
    assert seen == [True, False]


def _read(front: socket.socket) -> tuple[dict[str, Any], list[int]]:
    fds = array.array("i")
    data, ancillary, _, _ = front.recvmsg(1 << 16, socket.CMSG_SPACE(16))
    for level, kind, payload in ancillary:
        if (level, kind) == (socket.SOL_SOCKET, socket.SCM_RIGHTS):
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    return json.loads(data), list(fds)


async def test_the_control_socket_speaks_to_the_front() -> None:
    control = FrontControl()
    front = control.front_end.dup()  # the test plays the front (never blocking the loop)
    front.setblocking(False)
    control.attach(asyncio.get_running_loop())
    try:
        stub_end, stub = channel_pair()
        stub.setblocking(False)
        relayed = control.relay("m", "1", "m_0_0", stub_end)
        stub_end.close()
        message, fds = _read(front)
        assert message == {"op": "relay", "model": "m", "version": "1", "instance": 0,
                           "name": "m_0_0"}  # fmt: skip
        assert len(fds) == 2
        # What the stub sends reaches the front's copy of the server's end.
        transmit(stub, encode(Message({"op": "log", "message": "hi"})))
        received = socket.socket(fileno=fds[0])
        received.setblocking(False)
        payload, more = receive(received, bytearray(1 << 16))
        assert decode_all(payload, more)[0].fields["message"] == "hi"
        received.close()
        os.close(fds[1])
        relayed.close()
        stub.close()

        control.serve({"model": "m", "version": "1"})
        served, _ = _read(front)
        assert served["op"] == "serve" and served["token"] == control.token

        # Paused while any reason holds; told only when that changes.
        control.pause("tracing", True)
        control.pause("verbose log", True)
        control.pause("tracing", False)
        control.pause("verbose log", False)
        assert _read(front)[0] == {"op": "pause", "value": True}
        assert _read(front)[0] == {"op": "pause", "value": False}

        book = StatsBook()
        book.open("m", "1")
        syncing = asyncio.ensure_future(control.sync_stats(book))
        await asyncio.sleep(0.05)
        ask, _ = _read(front)
        assert ask["op"] == "stats"
        front.send(b"not JSON")  # ignored, logged
        reply = {"op": "stats", "seq": ask["seq"],
                 "rows": [["m", "1", 1, 2, 200, 20, 2, 4, 6, 99]]}  # fmt: skip
        front.send(json.dumps(reply).encode())
        await asyncio.wait_for(syncing, 5)
        doc = book.items()[0][1].to_json("m", "1")
        assert doc["inference_stats"]["success"] == {"count": 2, "ns": 200}
        # What the front took, on /metrics: its successes and the failures answered for it.
        control.count_answered("m", "1")
        (family,) = FrontCollector(control).collect()
        assert [(s.labels, s.value) for s in family.samples] == [
            ({"model": "m", "version": "1"}, 3)
        ]

        retiring = asyncio.ensure_future(control.retire("m", "1"))
        await asyncio.sleep(0.05)
        ask, _ = _read(front)
        assert ask == {"op": "retire", "model": "m", "version": "1", "seq": ask["seq"]}
        front.send(json.dumps({"op": "retired", "seq": ask["seq"]}).encode())
        await asyncio.wait_for(retiring, 5)
        # One instance (by the index its relay was given); one never relayed: nothing to ask.
        retiring = asyncio.ensure_future(control.retire_instance("m", "1", "m_0_0"))
        await asyncio.sleep(0.05)
        ask, _ = _read(front)
        assert ask == {"op": "retire", "model": "m", "version": "1", "instance": 0,
                       "seq": ask["seq"]}  # fmt: skip
        front.send(json.dumps({"op": "retired", "seq": ask["seq"]}).encode())
        await asyncio.wait_for(retiring, 5)
        await asyncio.wait_for(control.retire_instance("m", "1", "m_1_0"), 5)
    finally:
        front.close()
    # The front is gone: asks fail clearly, statistics are left as they are.
    await asyncio.sleep(0.05)
    assert control.closed
    with pytest.raises(ConnectionError):
        await control.retire("m", "1")
    await control.sync_stats(StatsBook())


async def test_a_spliced_channel_goes_on_over_the_relay() -> None:
    loop = asyncio.get_running_loop()
    server_end, stub = channel_pair()
    stub.setblocking(False)
    got: list[Message] = []
    channel = LoopChannel(server_end, loop, on_message=got.append, on_closed=lambda: None)
    transmit(stub, encode(Message({"op": "log", "message": "before"})))
    relay_server, relay_stub = channel_pair()  # the relay: its far end stands in for the front
    relay_stub.setblocking(False)
    former = channel.splice(relay_server)
    assert former is server_end
    # Unread on the former socket: the front relays it. Sends go over the relay.
    channel.send(Message({"op": "finalize"}))
    await asyncio.sleep(0.05)
    payload, fds = receive(relay_stub, bytearray(1 << 16))
    assert decode_all(payload, fds)[0].fields == {"op": "finalize"}
    transmit(relay_stub, encode(Message({"op": "log", "message": "after"})))
    await asyncio.sleep(0.05)
    assert [m.fields["message"] for m in got] == ["after"]
    payload, fds = receive(former, bytearray(1 << 16))
    assert decode_all(payload, fds)[0].fields["message"] == "before"
    channel.close()
    for sock in (former, stub, relay_stub):
        sock.close()
