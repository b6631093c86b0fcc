"""runtime.direct.front_door: a replica's one client of `thaw up`'s front door, against a real
aiohttp app on loopback playing the front door. BLS calls and ensemble steps: binary-extension
bodies both ways, each error answer as the ServingError of its status (one translation,
runtime.direct.infer_wire, with each use's own words when the front door says nothing or does
not answer), steps on a fresh connection each and BLS on a pool, a decoupled model refused
over HTTP when no gRPC front door was given, a forwarded request's headers and answer as they
are, and the client built from ServeConfig. (Forwarding on handed-off connections, max age,
hop-by-hop headers: test_handoff.py.)"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from aiohttp import web

from runtime.config import ServeConfig
from runtime.direct.front_door import FrontDoor
from runtime.direct.infer_wire import error_of_status, message_of
from runtime.errors import (
    DeadlineExceeded,
    InvalidInput,
    ModelNotFound,
    ModelUnavailable,
    ServingError,
    is_refusal,
)
from runtime.inference import InferRequest, InferTensor, RequestedOutput
from thawwire.error_marks import FROM_MODEL, GRPC_CODE
from thawwire.paths import SENT_BACK_QUERY


@dataclass
class _Door:
    """The fake front door: what it saw, and what it answers next."""

    url: str
    peers: list[tuple[str, int]] = field(default_factory=list)
    seen: list[dict[str, object]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    answer: tuple[int, bytes] | None = None  # an error answer instead of the doubled tensor
    answer_headers: dict[str, str] = field(default_factory=dict)  # with `answer`


async def _doubling_front_door(door: _Door, request: web.Request) -> web.Response:
    """Reads a binary-extension infer body, answers OUT = 2 * IN (INT32) in binary."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    door.peers.append(tuple(peer[:2]) if peer else ("", 0))
    door.headers.append(dict(request.headers))
    body = await request.read()
    length = int(request.headers["Inference-Header-Content-Length"])
    header = json.loads(body[:length])
    door.seen.append({"path": request.path, **header})
    if door.answer is not None:
        status, payload = door.answer
        return web.Response(status=status, body=payload, headers=door.answer_headers)
    (tensor,) = header["inputs"]
    values = np.frombuffer(body[length:], dtype="<i4") * 2
    raw = values.astype("<i4").tobytes()
    out = {
        "model_name": request.match_info["model"],
        "model_version": "1",
        "id": header.get("id", ""),
        "outputs": [
            {
                "name": "OUT",
                "datatype": "INT32",
                "shape": tensor["shape"],
                "parameters": {"binary_data_size": len(raw)},
            }
        ],
    }
    text = json.dumps(out).encode()
    return web.Response(
        body=text + raw,
        headers={"Inference-Header-Content-Length": str(len(text))},
        content_type="application/octet-stream",
    )


@pytest.fixture
async def door() -> AsyncIterator[_Door]:
    app = web.Application()
    state = _Door(url="")

    async def handle(request: web.Request) -> web.Response:
        return await _doubling_front_door(state, request)

    app.router.add_post("/v2/models/{model}/infer", handle)
    app.router.add_post("/v2/models/{model}/versions/{version}/infer", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    state.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield state
    finally:
        await runner.cleanup()


@pytest.fixture
async def client(door: _Door) -> AsyncIterator[FrontDoor]:
    front_door = FrontDoor(url=door.url, timeout_s=10, steps_url=door.url)
    try:
        yield front_door
    finally:
        await front_door.close()


def _request(version: str = "") -> InferRequest:
    return InferRequest(
        model_name="double",
        model_version=version,
        inputs=[InferTensor("IN", "INT32", (2, 2), np.arange(4, dtype=np.int32).reshape(2, 2))],
        requested_outputs=[RequestedOutput("OUT")],
        id="r7",
        parameters={"sequence_id": 3},
    )


async def test_a_bls_call_and_a_step_cross_in_binary_and_come_back_decoded(
    door: _Door, client: FrontDoor
) -> None:
    bls = await client.infer(_request(version="2"))
    steps = client.steps
    assert steps is not None
    step = await steps.infer(_request())
    for response in (bls, step):
        assert response.model_name == "double"
        (out,) = response.outputs
        assert (out.name, out.datatype, out.shape) == ("OUT", "INT32", (2, 2))
        assert np.array_equal(out.data, np.arange(4).reshape(2, 2) * 2)
    assert [s["path"] for s in door.seen] == [
        "/v2/models/double/versions/2/infer",
        "/v2/models/double/infer",
    ]
    for sent, headers in zip(door.seen, door.headers, strict=True):
        assert sent["id"] == "r7"
        assert sent["outputs"] == [{"name": "OUT", "parameters": {"binary_data": True}}]
        assert sent["parameters"] == {"sequence_id": 3}
        assert headers["Content-Type"] == "application/octet-stream"
        assert headers["Accept-Encoding"] == "identity"


async def test_steps_take_a_fresh_connection_each_and_bls_calls_a_pooled_one(
    door: _Door, client: FrontDoor
) -> None:
    steps = client.steps
    assert steps is not None
    for _ in range(3):
        await steps.infer(_request())
    stepped = set(door.peers)
    door.peers.clear()
    for _ in range(3):
        await client.infer(_request())
    assert len(stepped) == 3  # the front door routes each step on its own request line
    assert len(set(door.peers)) == 1


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, InvalidInput),
        (404, ModelNotFound),
        (503, ModelUnavailable),
        (504, DeadlineExceeded),
        (413, ServingError),
    ],
)
async def test_an_error_answer_is_the_error_of_its_status_for_bls_and_steps(
    door: _Door, client: FrontDoor, status: int, kind: type[ServingError]
) -> None:
    door.answer = (status, json.dumps({"error": f"refused with {status}"}).encode())
    steps = client.steps
    assert steps is not None
    for call in (client.infer, steps.infer):
        with pytest.raises(ServingError) as raised:
            await call(_request())
        assert type(raised.value) is kind
        assert (raised.value.status, raised.value.message) == (status, f"refused with {status}")


@pytest.mark.parametrize(
    ("marks", "from_model", "grpc_code"),
    [
        ({FROM_MODEL: "1", GRPC_CODE: "CANCELLED"}, True, "CANCELLED"),
        ({GRPC_CODE: "ALREADY_EXISTS"}, False, "ALREADY_EXISTS"),
        ({FROM_MODEL: "1"}, True, ""),
        ({FROM_MODEL: "yes", GRPC_CODE: "NOPE"}, False, ""),  # not a mark: the status alone
        ({}, False, ""),
    ],
)
async def test_an_error_answer_keeps_what_its_marks_say(
    door: _Door, client: FrontDoor, marks: dict[str, str], from_model: bool, grpc_code: str
) -> None:
    # A model's TritonError(CANCELLED) on another replica: 400 over HTTP, marked
    # (thawwire.error_marks), so a BLS caller reads no refusal and an ensemble answers gRPC's
    # CANCELLED, as in one Triton process.
    door.answer = (400, json.dumps({"error": "seven cancelled"}).encode())
    door.answer_headers = marks
    steps = client.steps
    assert steps is not None
    for call in (client.infer, steps.infer):
        with pytest.raises(InvalidInput) as raised:
            await call(_request())
        error = raised.value
        assert (error.status, error.message) == (400, "seven cancelled")
        assert (error.from_model, error.grpc_code, is_refusal(error)) == (
            from_model, grpc_code, not from_model
        )  # fmt: skip


async def test_an_error_answer_without_words_says_each_uses_own(
    door: _Door, client: FrontDoor
) -> None:
    door.answer = (500, b"")
    steps = client.steps
    assert steps is not None
    with pytest.raises(ServingError, match=r"^HTTP 500$"):
        await client.infer(_request())
    with pytest.raises(ServingError, match=r"^model 'double' answered 500$") as raised:
        await steps.infer(_request())
    assert raised.value.status == 500


async def test_an_unreadable_answer_is_a_serving_error_in_each_uses_words(
    door: _Door, client: FrontDoor
) -> None:
    steps = client.steps
    assert steps is not None
    door.answer = (200, b"not json")  # no header length: the whole body is the JSON header
    with pytest.raises(ServingError, match="the front door's BLS answer could not be read"):
        await client.infer(_request())
    with pytest.raises(ServingError, match="model 'double' answered unreadable JSON"):
        await steps.infer(_request())


async def test_an_answer_whose_header_length_is_not_a_number_is_a_serving_error(
    door: _Door, client: FrontDoor
) -> None:
    steps = client.steps
    assert steps is not None
    door.answer = (200, b'{"outputs": []}')
    door.answer_headers = {"Inference-Header-Content-Length": "12x"}
    for use in (client, steps):
        with pytest.raises(ServingError, match="is not a length: '12x'") as raised:
            await use.infer(_request())
        assert raised.value.status == 500


async def test_a_front_door_that_does_not_answer_is_unavailable_to_bls_and_502_to_steps(
    door: _Door,
) -> None:
    gone = "http://127.0.0.1:9"  # discard: nothing listens
    client = FrontDoor(url=gone, timeout_s=5, steps_url=gone)
    steps = client.steps
    assert steps is not None
    try:
        with pytest.raises(ModelUnavailable, match="the front door did not answer a BLS request"):
            await client.infer(_request())
        with pytest.raises(ServingError, match="model 'double' did not answer") as raised:
            await steps.infer(_request())
        assert raised.value.status == 502
    finally:
        await client.close()


async def test_without_a_grpc_front_door_a_decoupled_target_says_what_is_missing(
    door: _Door, client: FrontDoor
) -> None:
    # The HTTP front door answering a decoupled model's plain infer as Triton's does.
    refusal = "HTTP end point doesn't support models with decoupled transaction policy"
    door.answer = (400, json.dumps({"error": refusal}).encode())
    with pytest.raises(InvalidInput, match="needs thaw up's gRPC front door") as raised:
        async for _ in client.stream(_request()):
            pass
    assert refusal in raised.value.message
    door.answer = (400, json.dumps({"error": "no input 'IN'"}).encode())
    with pytest.raises(InvalidInput, match=r"^no input 'IN'$"):  # other refusals as they are
        async for _ in client.stream(_request()):
            pass


def test_error_answers_read_tritons_json_else_the_bodys_start() -> None:
    assert message_of(b'{"error": "model not ready"}') == "model not ready"
    assert message_of(b"<html>bad gateway</html>") == "<html>bad gateway</html>"
    assert message_of(b"x" * 1000) == "x" * 300
    assert message_of(b"[1, 2]") == "[1, 2]"  # JSON, but not Triton's error object
    error = error_of_status(429, "slow down")
    assert (type(error), error.status, error.message) == (ServingError, 429, "slow down")


def test_the_client_is_built_from_serve_config_with_each_address(tmp_path: Path) -> None:
    assert FrontDoor.from_config(ServeConfig(repository=tmp_path)) is None
    steps_only = FrontDoor.from_config(
        ServeConfig(repository=tmp_path, ensemble_steps_url="http://door:8000/")
    )
    assert steps_only is not None
    assert not steps_only.takes_bls  # BLS to an unknown model stays this server's answer
    assert steps_only.steps is not None and steps_only.steps_url == "http://door:8000"
    full = FrontDoor.from_config(
        ServeConfig(
            repository=tmp_path,
            front_door="http://door:8000",
            front_door_grpc="door:8001",
            ensemble_steps_url="http://door:8000",
        )
    )
    assert full is not None and full.takes_bls
    assert (full.url, full.grpc_address) == ("http://door:8000", "door:8001")


async def _serve(app: web.Application) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, runner.addresses[0][1]


async def test_a_forwarded_request_gets_no_client_headers_added_and_its_answer_as_sent() -> None:
    zipped = gzip.compress(b'{"answer": "from the front door"}')
    seen: list[tuple[str, dict[str, str], bytes]] = []

    async def front(request: web.Request) -> web.Response:
        seen.append((request.path_qs, dict(request.headers), await request.read()))
        return web.Response(body=zipped, headers={"Content-Encoding": "gzip"})

    front_app = web.Application()
    front_app.router.add_route("*", "/{tail:.*}", front)
    front_runner, front_port = await _serve(front_app)
    client = FrontDoor(url=f"http://127.0.0.1:{front_port}", timeout_s=10)

    async def replica(request: web.Request) -> web.StreamResponse:
        if request.path.endswith("/sent-back"):
            return await client.forward(request, close=False, body=b"read already")
        return await client.forward(request, close=False)

    replica_app = web.Application()
    replica_app.router.add_route("*", "/{tail:.*}", replica)
    replica_runner, replica_port = await _serve(replica_app)
    try:
        for path, body in (("/v2/repository/index", b"{}"), ("/v2/x/sent-back", b"ignored")):
            reader, writer = await asyncio.open_connection("127.0.0.1", replica_port)
            writer.write(
                f"POST {path} HTTP/1.1\r\nHost: replica\r\nAccept-Encoding: gzip\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            answer = await reader.read()
            writer.close()
            head, _, got = answer.partition(b"\r\n\r\n")
            assert b"content-encoding: gzip" in head.lower()
            assert got == zipped  # passed on compressed, as the front door sent it
        (first, headers, sent), (second, _, sent_back) = seen
        assert (first, sent) == (f"/v2/repository/index?{SENT_BACK_QUERY}", b"{}")
        assert "User-Agent" not in headers and "Content-Type" not in headers
        assert headers["Accept-Encoding"] == "gzip" and headers["Host"] != "replica"
        assert (second, sent_back) == (f"/v2/x/sent-back?{SENT_BACK_QUERY}", b"read already")
    finally:
        await replica_runner.cleanup()
        await client.close()
        await front_runner.cleanup()
