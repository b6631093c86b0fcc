"""Where a stub's messages go: each execute's answer, each request's responses, its asks.

    done {id}              ─▶ the execute's future (runtime.python.stub_backend awaits it)
    send {key, response?}  ─▶ a decoupled request's sink, or a non-decoupled request's answer
    call is_cancelled      ─▶ reply {call, value}: whether its client went away
    bls, call, log         ─▶ StubServices (runtime.python.stub_services)
    ready | failed         ─▶ the start's future (the answer to `init`)

A non-decoupled request answered through its response sender (Triton's semantics): a response
sent during `execute` reaches its client at once (the request's `completion` is resolved); one
sent after `execute` returned is awaited before this execute's results are given (the instance
stays busy until then); the first response wins. When the stub dies, what it held fails with
Triton's error, but the executes it never started are answered `RETRY` (sent again to the stub
started next). Everything here runs on the server's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Protocol

from runtime.errors import ServingError
from runtime.inference import InferRequest, InferResponse, InferTensor
from runtime.python.model_io import (
    ERROR_CLASSES,
    complete_early,
    execute_failure,
    request_cancelled,
    rescheduled,
)
from runtime.python.stub.wire import ChannelClosed, Message, Tensor
from runtime.python.stub_services import StubServices

__all__ = ["RETRY", "StubAnswers", "StubEnd"]

# The answer to an execute the stub never started because it died first: send it again.
RETRY = Message({"op": "retry"})
# A non-decoupled request's result until its sender's response comes (after the execute).
_SENDER_PLACEHOLDER = ServingError("the model's response sender has not answered yet")


class StubEnd(Protocol):
    """The stub a message came from, as its answer goes back: its channel's `send`."""

    def send(self, message: Message) -> None: ...


class StubAnswers:
    """One instance's executes in flight and the requests they hold, answered from its stub's
    messages (every method on the event loop, but `results` in a benchmark)."""

    def __init__(
        self,
        services: StubServices | None = None,
        *,
        name: str = "",
        version: str = "",
        instance: str = "",
        declared: dict[str, str] | None = None,
        decoupled: bool = False,
        iterative: bool = False,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """`declared`: the outputs' datatypes in the config (runtime.python.model_io
        `output_types`); `iterative`: sequence_batching { iterative_sequence } (a model that
        may reschedule); `loop`: the server's (None: the running one, asked when needed)."""
        self._services = services
        self._name, self._version, self._instance = name, version, instance
        self._declared = declared or {}
        self._decoupled = decoupled
        self._iterative = iterative
        self._loop = loop
        # The answer to `init` the stub's start awaits ("ready" or "failed"; None: it died).
        self.initializing: asyncio.Future[Message | None] | None = None
        self._exec_id = 0
        self._pending: dict[int, asyncio.Future[Message | None]] = {}
        self._sinks: dict[tuple[int, int], InferRequest] = {}
        # Non-decoupled requests (Triton's response sender, above): each execute's requests
        # until its answer; the responses their senders sent before it; and those whose
        # response will come after it (the model returned None for them).
        self._executing: dict[int, list[InferRequest]] = {}
        self._answered: dict[tuple[int, int], InferResponse | ServingError] = {}
        self._waiting: dict[tuple[int, int], tuple[asyncio.Future[Any], InferRequest]] = {}

    # -- an execute's requests, held until its answer -----------------------------------------

    def register(self, requests: list[InferRequest]) -> tuple[int, asyncio.Future[Message | None]]:
        """A new execute of `requests`: its id, and the future its `done` (or RETRY) resolves."""
        self._exec_id += 1
        exec_id = self._exec_id
        future: asyncio.Future[Message | None] = self._loop_now().create_future()
        self._pending[exec_id] = future
        self._executing[exec_id] = requests
        if self._decoupled:
            for index, request in enumerate(requests):
                if request.response_sink is not None:
                    self._sinks[(exec_id, index)] = request
        return exec_id, future

    def _loop_now(self) -> asyncio.AbstractEventLoop:
        """The loop this instance runs on, which is the running one (asked only if it is not
        known: `asyncio.get_running_loop()` costs a getpid() system call on Python 3.11)."""
        loop = self._loop
        return loop if loop is not None else asyncio.get_running_loop()

    def forget(self, exec_id: int, count: int) -> None:
        """An execute of `count` requests that will have no answer from the stub."""
        self._pending.pop(exec_id, None)
        self._executing.pop(exec_id, None)
        for index in range(count):
            self._sinks.pop((exec_id, index), None)

    def _unhealthy_one(self) -> ServingError:
        return execute_failure(self._instance, f"Stub process '{self._instance}' is not healthy.")

    def unhealthy(self, requests: list[InferRequest]) -> list[InferResponse | ServingError]:
        """Triton's error for each of `requests`, which no stub runs (a stream ends with it)."""
        error = self._unhealthy_one()
        for request in requests:
            if request.response_sink is not None:
                request.response_sink.send(error, final=True)
        return [error for _ in requests]

    # -- an execute's answer ------------------------------------------------------------------

    def results(
        self, exec_id: int, requests: list[InferRequest], reply: Message | None
    ) -> tuple[list[InferResponse | ServingError], list[tuple[int, asyncio.Future[Any]]]]:
        """One result per request, and (index, future) of each request whose response its
        sender sends after the execute (its result until then is a placeholder)."""
        self._executing.pop(exec_id, None)
        # What each request's sender already sent is its answer, whatever the execute says
        # after (Triton: its client has it; a second response or an error is dropped).
        early = (
            {i: self._answered.pop((exec_id, i)) for i in range(len(requests))
             if (exec_id, i) in self._answered}
            if self._answered else {}
        )  # fmt: skip
        if reply is None:  # the stub died with this execute in flight
            self.forget(exec_id, len(requests))
            return self._with_early(self.unhealthy(requests), early), []
        error = reply.fields.get("error")
        if error is not None:
            self.forget(exec_id, len(requests))
            failure = execute_failure(self._instance, str(error))
            return self._with_early([failure for _ in requests], early), []
        again = reply.fields.get("reschedule")
        if self._decoupled:
            flags: list[InferResponse | ServingError] = [
                InferResponse(self._name, self._version, [], id=r.id, flag_only=True)
                for r in requests
            ]
            for index in again or ():
                flags[index] = self._rescheduled(exec_id, int(index), requests[int(index)])
            return flags, []
        rows = reply.fields.get("responses", [])
        out: list[InferResponse | ServingError] = []
        waits: list[tuple[int, asyncio.Future[Any]]] = []
        tensors, at = reply.tensors, 0
        for index, (request, row) in enumerate(zip(requests, rows, strict=True)):
            count = int(row.get("n", 0))
            if early and index in early:
                out.append(early[index])
            elif row.get("reschedule"):
                out.append(
                    rescheduled(self._name, self._version, request, iterative=self._iterative)
                )
            elif row.get("sender"):
                out.append(_SENDER_PLACEHOLDER)
                future = self._loop_now().create_future()
                self._waiting[(exec_id, index)] = (future, request)
                waits.append((index, future))
            else:
                out.append(self._response(request.id, row, tensors[at : at + count]))
            at += count
        return out, waits

    def _rescheduled(
        self, exec_id: int, index: int, request: InferRequest
    ) -> InferResponse | ServingError:
        """A decoupled request the model released with RESCHEDULE: its stream stays open for
        the execute that runs it again (which registers it anew); a model that cannot be
        rescheduled ends it with Triton's error."""
        self._sinks.pop((exec_id, index), None)
        result = rescheduled(self._name, self._version, request, iterative=self._iterative)
        if isinstance(result, ServingError) and request.response_sink is not None:
            request.response_sink.send(result, final=True)
        return result

    @staticmethod
    def _with_early(
        results: list[InferResponse | ServingError],
        early: dict[int, InferResponse | ServingError],
    ) -> list[InferResponse | ServingError]:
        for index, answer in early.items():
            results[index] = answer
        return results

    async def await_senders(
        self,
        exec_id: int,
        results: list[InferResponse | ServingError],
        waits: list[tuple[int, asyncio.Future[Any]]],
    ) -> None:
        """Wait for the responses a non-decoupled model sends after its execute returned (as
        in Triton, where the request ends with its sender's response). Each wait ends: with
        that response, an error when the model let go of the sender without one (the stub
        tells), or when the stub dies."""
        try:
            for index, future in waits:
                results[index] = await future
        finally:  # cancelled (the server stops): forget the rest
            for index, _ in waits:
                self._waiting.pop((exec_id, index), None)

    def _response(
        self, request_id: str | None, row: dict[str, Any] | None, tensors: list[Tensor]
    ) -> InferResponse | ServingError:
        if row is None or row.get("none"):
            return ServingError(f"model '{self._name}' sent no response for a request")
        if "error" in row:
            cls = ERROR_CLASSES.get(int(row.get("code", 1)), ServingError)
            return cls(str(row["error"]), from_model=True)
        outputs = []
        declared = self._declared
        for t in tensors:
            datatype = t.datatype
            if datatype == "UINT16" and declared.get(t.name) == "BF16":
                datatype = "BF16"
            outputs.append(InferTensor(t.name, datatype, t.shape, t.data))
        return InferResponse(
            self._name, self._version, outputs, id=request_id, parameters=row.get("params") or {}
        )

    # -- the stub's messages (the loop's reader callback) --------------------------------------

    def route(self, stub: StubEnd, message: Message) -> None:
        """Take one message of `stub`'s; ValueError, KeyError or TypeError: a malformed one."""
        op = message.fields.get("op")
        services = self._services
        assert services is not None  # set by load, before any stub starts
        if op == "done":
            future = self._pending.pop(int(message.fields["id"]), None)
            if future is not None and not future.done():
                future.set_result(message)
        elif op == "send":
            self._send(message)
        elif op == "bls":
            services.bls(stub.send, message)
        elif op == "call":
            if message.fields.get("fn") == "is_cancelled":
                self._reply_cancelled(stub, message)
            else:
                services.call(stub.send, message)
        elif op == "log":
            services.log(message)
        elif op in ("ready", "failed"):
            initializing = self.initializing
            if initializing is not None and not initializing.done():
                initializing.set_result(message)
        elif op != "finalized":
            raise ValueError(f"unknown op {op!r}")

    def _reply_cancelled(self, stub: StubEnd, message: Message) -> None:
        """`is_cancelled()` of a request or its sender, asked by the model."""
        exec_id, index = (int(a) for a in message.fields.get("args", ()))
        key = (exec_id, index)
        request = self._sinks.get(key)
        if request is None and key in self._waiting:
            request = self._waiting[key][1]
        if request is None:
            batch = self._executing.get(exec_id)
            request = batch[index] if batch is not None and 0 <= index < len(batch) else None
        value = request is not None and request_cancelled(request)
        with contextlib.suppress(ChannelClosed):
            stub.send(Message({"op": "reply", "call": message.fields["call"], "value": value}))

    def _answer(self, key: tuple[int, int], row: dict[str, Any], tensors: list[Tensor]) -> None:
        """A non-decoupled request's response from its sender: the first one is its answer,
        sent to its client at once; later ones are dropped (the stub refuses them anyway)."""
        waiting = self._waiting.pop(key, None)
        if waiting is not None:
            future, request = waiting
            if not future.done():
                future.set_result(self._response(request.id, row, tensors))
            return
        batch = self._executing.get(key[0])
        if batch is None or not 0 <= key[1] < len(batch) or key in self._answered:
            return  # its execute is over and its answer given
        request = batch[key[1]]
        self._answered[key] = result = self._response(request.id, row, tensors)
        complete_early(request, result)

    def _send(self, message: Message) -> None:
        exec_id, index = (int(k) for k in message.fields["key"])
        final = bool(message.fields.get("final"))
        if not self._decoupled:
            row = message.fields.get("response")
            if row is not None:
                self._answer((exec_id, index), row, message.tensors)
            return
        request = self._sinks.get((exec_id, index))
        if final:
            self._sinks.pop((exec_id, index), None)
        sink = request.response_sink if request is not None else None
        if request is None or sink is None:
            return
        row = message.fields.get("response")
        if row is None:
            sink.send(None, final=final)
            return
        sink.send(self._response(request.id, row, message.tensors), final=final)

    # -- the stub died ------------------------------------------------------------------------

    def stub_died(self, *, unloading: bool) -> None:
        """Fail what the dead stub held; unless `unloading`, the executes it never started are
        answered RETRY (their streams stay open, registered again when they are sent again)."""
        pending, self._pending = self._pending, {}
        sinks, self._sinks = self._sinks, {}
        self._executing, self._answered = {}, {}
        waiting, self._waiting = self._waiting, {}
        for future, _ in waiting.values():
            if not future.done():
                future.set_result(self._unhealthy_one())
        # The stub runs executes in order and answers each before it starts the next: the
        # oldest unanswered one was running when it died; the later ones never started, and
        # go to the next stub (only in-flight requests fail, as in Triton).
        running = min(pending, default=None)
        for exec_id, future in pending.items():
            if not future.done():
                future.set_result(None if exec_id == running or unloading else RETRY)
        error = self._unhealthy_one()
        for (exec_id, _), request in sinks.items():
            if running is not None and exec_id > running and not unloading:
                continue  # registered again when retried
            if request.response_sink is not None:
                request.response_sink.send(error, final=True)
