"""runtime.grpc.stream over a fake model service: many responses per request with Triton's
final flag, the empty final response on request, request order for non-decoupled models only,
in-stream errors, and a bounded number of requests in flight."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import numpy as np
import pytest

from runtime.errors import InvalidInput, ModelNotFound, ServingError
from runtime.grpc.stream import MAX_IN_FLIGHT, serve_stream
from runtime.inference import InferRequest, InferResponse, InferTensor
from thawwire.grpc_service import pb


class _Aborted(Exception):
    pass


class _Context:
    """The part of grpc.aio.ServicerContext a stream uses."""

    def __init__(self, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self.metadata = metadata
        self.written: list[Any] = []
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata

    async def write(self, data: bytes) -> None:
        self.written.append(pb.ModelStreamInferResponse.FromString(data))

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise _Aborted(details)


class _Models:
    """`model` answers per its script: a list of (delay_s, final) responses, or an error."""

    def __init__(self, scripts: dict[str, Any], decoupled: set[str]) -> None:
        self.scripts = scripts
        self.decoupled = decoupled
        self.in_flight = self.peak = 0

    def config(self, name: str, version: str | None) -> dict[str, Any]:
        if name not in self.scripts:
            raise ServingError("unknown")
        return {"model_transaction_policy": {"decoupled": name in self.decoupled}}

    def answers_as_they_come(self, name: str, version: str | None) -> bool:
        return name in self.decoupled

    def model_ready(self, name: str, version: str | None) -> bool:
        return True

    async def stream(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            script = self.scripts[request.model_name]
            if isinstance(script, Exception):
                raise script
            for index, (delay_s, final) in enumerate(script):
                await asyncio.sleep(delay_s)
                out = InferTensor("OUT", "INT32", (1,), np.array([index], np.int32))
                yield InferResponse(request.model_name, "1", [out], id=request.id, final=final)
        finally:
            self.in_flight -= 1


def _request(model: str, request_id: str, **bools: bool) -> bytes:
    message = pb.ModelInferRequest(model_name=model, id=request_id)
    message.inputs.add(name="IN", datatype="INT32", shape=[1])
    message.raw_input_contents.append(b"\x00" * 4)
    for key, value in bools.items():
        message.parameters[key].bool_param = value
    return message.SerializeToString()


async def _requests(*items: bytes) -> AsyncIterator[bytes]:
    for item in items:
        yield item


def _seen(context: _Context) -> list[tuple[str, bool | None, str]]:
    rows = []
    for answer in context.written:
        response = answer.infer_response
        final = response.parameters["triton_final_response"].bool_param if (
            "triton_final_response" in response.parameters
        ) else None  # fmt: skip
        rows.append((response.id, final, answer.error_message))
    return rows


async def test_many_responses_carry_the_final_flag_and_an_empty_final_on_request() -> None:
    models = _Models({"dec": [(0, False), (0, False)], "one": [(0, True)]}, decoupled={"dec"})
    context = _Context()
    stream = _requests(
        _request("dec", "a", triton_enable_empty_final_response=True),
        _request("dec", "b"),  # no empty final asked: its stream just ends
        _request("one", "c"),
    )
    await serve_stream(models, stream, context)  # type: ignore[arg-type]
    seen = _seen(context)
    assert seen.count(("a", False, "")) == 2 and ("a", True, "") in seen
    assert seen.count(("b", False, "")) == 2 and ("b", True, "") not in seen
    assert ("c", True, "") in seen
    empty = next(
        a for a in context.written if a.infer_response.id == "a" and not a.infer_response.outputs
    )
    assert empty.infer_response.model_name == "dec"


class _FlagOnlyEnd(_Models):
    """A decoupled model that sends one response, then the final flag alone (as Triton's
    `sender.send(flags=FINAL)`), for a client that asked for output OUT."""

    async def stream(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        out = InferTensor("OUT", "INT32", (1,), np.array([7], np.int32))
        yield InferResponse(request.model_name, "1", [out], id=request.id, final=False)
        end = InferResponse(request.model_name, "1", [], id=request.id, final=True)
        end.flag_only = True
        yield end


async def test_a_bare_final_flag_is_not_an_answer_unless_empty_finals_are_asked_for() -> None:
    def asking_for_out(request_id: str, **bools: bool) -> bytes:
        message = pb.ModelInferRequest.FromString(_request("dec", request_id, **bools))
        message.outputs.add(name="OUT")
        return message.SerializeToString()

    context = _Context()
    requests = _requests(
        asking_for_out("a"), asking_for_out("b", triton_enable_empty_final_response=True)
    )
    await serve_stream(_FlagOnlyEnd({"dec": []}, {"dec"}), requests, context)  # type: ignore[arg-type]
    seen = _seen(context)
    assert sorted(seen) == [("a", False, ""), ("b", False, ""), ("b", True, "")]  # no errors


async def test_non_decoupled_answers_keep_request_order_decoupled_ones_do_not() -> None:
    models = _Models(
        {"slow": [(0.2, True)], "fast": [(0, True)], "dec": [(0, True)]}, decoupled={"dec"}
    )
    context = _Context()
    await serve_stream(
        models,  # type: ignore[arg-type]
        _requests(_request("slow", "1"), _request("fast", "2"), _request("dec", "3")),
        context,
    )
    assert [row[0] for row in _seen(context)] == ["3", "1", "2"]


async def test_errors_are_answered_in_stream_in_order_and_the_stream_goes_on() -> None:
    models = _Models(
        {"slow": [(0.1, True)], "bad": InvalidInput("bad tensor"), "ok": [(0, True)]},
        decoupled=set(),
    )
    context = _Context()
    garbage = b"\xff\xff\xff"
    await serve_stream(
        models,  # type: ignore[arg-type]
        _requests(_request("slow", "1"), _request("bad", "2"), garbage, _request("ok", "4")),
        context,
    )
    seen = _seen(context)
    assert [row[0] for row in seen] == ["1", "2", "", "4"]
    assert seen[1][2] == "bad tensor" and seen[1][1] is True
    assert "could not be parsed" in seen[2][2]
    assert context.aborted is None


async def test_the_grpc_error_header_ends_the_stream_with_the_errors_status() -> None:
    # A model's own error ends it (Triton 2.51), even one with a 400's code.
    models = _Models(
        {"bad": InvalidInput("bad tensor", from_model=True), "ok": [(0.2, True)]},
        decoupled=set(),
    )
    context = _Context((("triton_grpc_error", "true"),))
    with pytest.raises(_Aborted):
        await serve_stream(
            models,  # type: ignore[arg-type]
            _requests(_request("ok", "1"), _request("bad", "2")),
            context,
        )
    assert context.aborted == (grpc.StatusCode.INVALID_ARGUMENT, "bad tensor")
    # The slower request sent first is answered first, as the stream's order has it.
    assert [row[0] for row in _seen(context)] == ["1"]


async def test_with_the_grpc_error_header_a_refused_request_is_answered_in_stream() -> None:
    # Triton 2.51 answers a request it refuses before running it in-stream even then.
    models = _Models(
        {"bad": InvalidInput("bad tensor"), "gone": ModelNotFound("no model"), "ok": [(0, True)]},
        decoupled=set(),
    )
    context = _Context((("triton_grpc_error", "true"),))
    await serve_stream(
        models,  # type: ignore[arg-type]
        _requests(_request("bad", "1"), _request("gone", "2"), _request("ok", "3")),
        context,
    )
    seen = _seen(context)
    assert [(row[0], row[2]) for row in seen] == [("1", "bad tensor"), ("2", "no model"), ("3", "")]
    assert context.aborted is None


async def test_requests_in_flight_are_bounded() -> None:
    models = _Models({"dec": [(0.05, True)]}, decoupled={"dec"})
    context = _Context()
    n = MAX_IN_FLIGHT + 50
    await serve_stream(
        models,  # type: ignore[arg-type]
        _requests(*(_request("dec", str(i)) for i in range(n))),
        context,
    )
    assert len(context.written) == n
    assert models.peak == MAX_IN_FLIGHT
