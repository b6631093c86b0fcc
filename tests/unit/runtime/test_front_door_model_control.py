"""runtime.direct.front_door's model loading API: a Python model's `pb_utils.load_model`,
`unload_model` and `is_model_ready` under `thaw up` ask the front door, against a real aiohttp
app on loopback playing it. The calls keep one connection of their own (a readiness check
that meets it closed goes again; a load does not), each is marked sent back (a load that
replaces the calling replica must not wait for its stop), carries the deployment's token
(a load's files pass up to the internal body cap), names the model as one path segment
whatever it holds, and sends the override as Triton's REST load does (`config`, base64
`file:` keys); a refusal is the ServingError of its status in the front door's words, a
readiness refusal is False, and a front door that does not answer is ModelUnavailable."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from runtime.direct.front_door import FrontDoor
from runtime.errors import InvalidInput, ModelUnavailable
from thawwire.internal_calls import HEADER, InternalCalls
from thawwire.paths import SENT_BACK_QUERY

_TOKEN = "t" * 43


@dataclass
class _Door:
    url: str = ""
    seen: list[dict[str, Any]] = field(default_factory=list)
    answer: tuple[int, str] = (200, "")
    drops: int = 0  # requests to answer by closing the connection instead


@pytest.fixture
async def door() -> AsyncIterator[_Door]:
    state = _Door()

    async def handle(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        state.seen.append(
            {
                "method": request.method,
                "path": request.raw_path,
                "model": request.match_info["model"],
                "token": request.headers.get(HEADER),
                "body": await request.json() if request.body_exists else None,
                "peer": tuple(peer[:2]) if peer else None,
            }
        )
        if state.drops:
            state.drops -= 1
            assert request.transport is not None
            request.transport.close()  # as a front door closing a kept connection
        status, text = state.answer
        return web.json_response({"error": text} if status != 200 else {}, status=status)

    app = web.Application()
    app.router.add_post("/v2/repository/models/{model}/{action:load|unload}", handle)
    app.router.add_get("/v2/models/{model}/ready", handle)
    app.router.add_get("/v2/models/{model}/versions/{version}/ready", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    state.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield state
    finally:
        await runner.cleanup()


@pytest.fixture
async def client(door: _Door) -> AsyncIterator[FrontDoor]:
    internal = InternalCalls(_TOKEN, max_body_bytes=1 << 30)
    front_door = FrontDoor(url=door.url, timeout_s=10, internal=internal)
    try:
        yield front_door
    finally:
        await front_door.close()


async def test_a_load_sends_the_override_as_a_rest_load_marked_sent_back_with_the_token(
    door: _Door, client: FrontDoor
) -> None:
    files = {"1/model.py": b"\x00print('hi')\xff"}
    await client.load("m", '{"backend": "python"}', files)
    await client.load("plain", None, None)
    first, second = door.seen
    assert first["method"] == "POST"
    assert first["path"] == f"/v2/repository/models/m/load?{SENT_BACK_QUERY}"
    assert first["token"] == _TOKEN
    assert first["body"] == {
        "parameters": {
            "config": '{"backend": "python"}',
            "file:1/model.py": base64.b64encode(files["1/model.py"]).decode(),
        }
    }
    assert second["body"] == {"parameters": {}}  # no override: the repository's files


async def test_an_unload_names_its_dependents_only_when_asked(
    door: _Door, client: FrontDoor
) -> None:
    await client.unload("m")
    await client.unload("m", unload_dependents=True)
    assert [s["path"] for s in door.seen] == [
        f"/v2/repository/models/m/unload?{SENT_BACK_QUERY}"
    ] * 2
    assert [s["body"] for s in door.seen] == [
        {"parameters": {}},
        {"parameters": {"unload_dependents": True}},
    ]


async def test_the_calls_keep_one_connection_of_their_own(door: _Door, client: FrontDoor) -> None:
    for _ in range(3):
        await client.model_ready("m", None)
    await client.load("m", None, None)
    await client.unload("m")
    # one front door answers a load and the readiness after it (the same activator, on Kubernetes)
    assert len({s["peer"] for s in door.seen}) == 1


async def test_a_readiness_check_that_meets_its_connection_closed_goes_again(
    door: _Door, client: FrontDoor
) -> None:
    assert await client.model_ready("m", None) is True
    door.drops = 1
    assert await client.model_ready("m", None) is True
    assert len(door.seen) == 3 and len({s["peer"] for s in door.seen[1:]}) == 2
    door.drops = 10  # closed every time: the front door does not answer
    with pytest.raises(ModelUnavailable, match="did not answer a model-control call"):
        await client.model_ready("m", None)
    assert door.drops > 0  # resent a bounded number of times


async def test_a_load_that_meets_its_connection_closed_is_not_sent_again(
    door: _Door, client: FrontDoor
) -> None:
    await client.model_ready("m", None)
    door.drops = 1
    with pytest.raises(ModelUnavailable, match="did not answer a model-control call"):
        await client.load("m", None, None)
    assert [s["method"] for s in door.seen] == ["GET", "POST"]


async def test_readiness_is_the_front_doors_answer_and_a_refusal_is_false(
    door: _Door, client: FrontDoor
) -> None:
    assert await client.model_ready("m", None) is True
    assert await client.model_ready("m", "2") is True
    door.answer = (503, "model 'm' is not ready: not loaded")
    assert await client.model_ready("m", None) is False
    door.answer = (404, "Request for unknown model: 'm' is not found")
    assert await client.model_ready("m", "3") is False
    assert [s["path"] for s in door.seen] == [
        f"/v2/models/m/ready?{SENT_BACK_QUERY}",
        f"/v2/models/m/versions/2/ready?{SENT_BACK_QUERY}",
        f"/v2/models/m/ready?{SENT_BACK_QUERY}",
        f"/v2/models/m/versions/3/ready?{SENT_BACK_QUERY}",
    ]


@pytest.mark.parametrize("name", ["a/b", "a?b=1", "x#y", "spa ce", "..", "%2F", "ü"])
async def test_a_model_name_is_one_path_segment_whatever_it_holds(
    door: _Door, client: FrontDoor, name: str
) -> None:
    await client.load(name, None, None)
    await client.model_ready(name, None)
    assert [s["model"] for s in door.seen] == [name, name]


async def test_a_refused_load_is_the_error_of_its_status_in_the_front_doors_words(
    door: _Door, client: FrontDoor
) -> None:
    why = "failed to load 'nope', failed to poll from model repository"
    door.answer = (400, why)
    with pytest.raises(InvalidInput) as raised:
        await client.load("nope", None, None)
    assert (raised.value.status, raised.value.message) == (400, why)
    with pytest.raises(InvalidInput):
        await client.unload("nope")


async def test_a_front_door_that_does_not_answer_is_model_unavailable(door: _Door) -> None:
    gone = FrontDoor(url="http://127.0.0.1:9", timeout_s=5)  # discard port: nothing listens
    try:
        for call in (gone.load("m", None, None), gone.unload("m"), gone.model_ready("m", None)):
            with pytest.raises(ModelUnavailable, match="did not answer a model-control call"):
                await call
    finally:
        await gone.close()
