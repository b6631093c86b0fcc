"""A stub's model-loading calls on the server (runtime.python.stub_services.StubServices.call):
`load_model`, `unload_model` and `is_model_ready` are answered from a thread of their own (each
may wait on the front door, which needs the loop), with the host's answer or its refusal
(readiness a server answers itself, at once on the loop); a
call whose arguments are not what a stub sends is answered with an error, never left
unanswered (the model waiting for it would hang)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, cast

import pytest

from runtime.python import pb_utils
from runtime.python.stub.wire import Message
from runtime.python.stub_services import StubServices


class _Host:
    """Records each model call and the thread it ran on; `refusal` raises Triton's way."""

    metric_family = metric_create = metric_update = metric_value = None  # not asked here

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.threads: set[int] = set()
        self.refusal: str | None = None
        self.asks_platform = True  # as under `thaw up`: readiness asks the front door

    def _record(self, fn: str, *args: Any) -> None:
        self.threads.add(threading.get_ident())
        self.calls.append((fn, args))
        if self.refusal is not None:
            raise pb_utils.TritonModelException(self.refusal)

    def load_model(self, name: str, config: str, files: Any) -> None:
        self._record("load_model", name, config, files)

    def unload_model(self, name: str, unload_dependents: bool) -> None:
        self._record("unload_model", name, unload_dependents)

    def is_model_ready(self, name: str, version: str) -> bool:
        self._record("is_model_ready", name, version)
        return name == "up"


async def _answer(services: StubServices, fields: dict[str, Any]) -> dict[str, Any]:
    replies: asyncio.Queue[Message] = asyncio.Queue()
    services.call(replies.put_nowait, Message({"op": "call", "call": 7, **fields}))
    reply = await asyncio.wait_for(replies.get(), timeout=10)
    return dict(reply.fields)


async def test_each_model_call_is_answered_off_the_loop_with_the_hosts_answer() -> None:
    host = _Host()
    services = StubServices(cast(Any, host))
    assert (await _answer(services, {"fn": "is_model_ready", "args": ["up", ""]}))["value"] is True
    assert (await _answer(services, {"fn": "is_model_ready", "args": ["down", "2"]}))[
        "value"
    ] is False
    assert (await _answer(services, {"fn": "load_model", "args": ["m", "{}"]}))["value"] is None
    assert (await _answer(services, {"fn": "unload_model", "args": ["m", True]}))["value"] is None
    assert [c[0] for c in host.calls] == ["is_model_ready"] * 2 + ["load_model", "unload_model"]
    assert threading.get_ident() not in host.threads


async def test_a_refusal_is_the_calls_error() -> None:
    host = _Host()
    host.refusal = "explicit model load / unload is not allowed if polling is enabled"
    services = StubServices(cast(Any, host))
    for fn in ("load_model", "unload_model", "is_model_ready"):
        reply = await _answer(services, {"fn": fn, "args": ["m", ""]})
        assert reply["error"] == host.refusal and "value" not in reply


@pytest.mark.parametrize("args", [[], ["m"], None, 7, {"a": 1}])
async def test_arguments_no_stub_sends_are_answered_with_an_error(args: object) -> None:
    services = StubServices(cast(Any, _Host()))
    for fn in ("load_model", "unload_model", "is_model_ready"):
        reply = await _answer(services, {"fn": fn, "args": args})
        assert reply["error"].startswith(f"bad {fn} call from the stub")


async def test_readiness_the_server_answers_itself_is_answered_at_once_on_the_loop() -> None:
    host = _Host()
    host.asks_platform = False  # `thaw serve`: its own model table, no front door
    services = StubServices(cast(Any, host))
    replies: list[Message] = []
    services.call(replies.append, Message({"op": "call", "call": 1, "fn": "is_model_ready",
                                           "args": ["up", ""]}))  # fmt: skip
    assert [r.fields["value"] for r in replies] == [True]  # before `call` returned
    assert host.threads == {threading.get_ident()}
