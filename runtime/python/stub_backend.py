"""A Python model instance in its own stub process, as Triton's python backend runs them.

    event loop ── execute_async ─▶ LoopChannel ─▶ stub process (its own interpreter and GIL)
               ◀── done ◀── add_reader ◀──────────┘   (also: sender sends → each request's
                                                       sink or answer; is_cancelled → the
                                                       request; BLS and calls → StubServices)

A non-decoupled request answered through its response sender (Triton's semantics): a response
sent during `execute` reaches its client at once (the request's `completion` is resolved); one
sent after `execute` returned is awaited before this execute's results are given (the instance
stays busy until then); the first response wins.

Everything about a stub happens on the server's event loop, without a thread: the dispatcher
awaits `execute_async` (runtime.scheduling.loop_instance), the stub's answer is read by the loop's
reader callback, which resolves the request's future directly. If the stub dies (a segfault,
`os._exit`), its in-flight requests fail with Triton's error, another stub is started
(initialize again) and the server keeps serving. `EXECUTION_ENV_PATH` (a directory or a
tarball holding `bin/python`) picks the interpreter (runtime.python.stub_process).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from runtime.backends.base import ExecTimings, LoadContext
from runtime.errors import RepositoryError, ServingError
from runtime.inference import InferRequest, InferResponse, InferTensor
from runtime.python.loop_channel import LoopChannel
from runtime.python.model_io import (
    ERROR_CLASSES,
    complete_early,
    execute_failure,
    model_args,
    model_parameters,
    output_types,
    request_cancelled,
    request_flags,
    rescheduled,
)
from runtime.python.placement import execution_env_path
from runtime.python.server_host import ServerHost, current_server_host
from runtime.python.stub.wire import ChannelClosed, Message, Tensor, encode, transmit
from runtime.python.stub_process import SpawnedStub, spawn, stub_python
from runtime.python.stub_services import StubServices

__all__ = ["StubPython", "stub_python"]

logger = logging.getLogger(__name__)

_START_TIMEOUT_S = 300.0  # initialize() may load weights; Triton's stub timeout is shorter
_FINALIZE_TIMEOUT_S = 30.0
# Inputs over this many bytes are written to their memfds in a thread, not on the loop.
_ENCODE_OFF_LOOP_BYTES = 1 << 20


# The answer to an execute the stub never started because it died first: send it again.
_RETRY = Message({"op": "retry"})
# A non-decoupled request's result until its sender's response comes (after the execute).
_SENDER_PLACEHOLDER = ServingError("the model's response sender has not answered yet")


class StubRelay(Protocol):
    """What relays a stub's socket (runtime.process.front_control.FrontControl)."""

    def relay(
        self, model: str, version: str, instance: str, stub: socket.socket
    ) -> socket.socket: ...

    async def retire_instance(self, model: str, version: str, instance: str) -> None: ...


class _Stub:
    """One running stub process and its channel on the loop."""

    def __init__(self, spawned: SpawnedStub) -> None:
        self.proc = spawned.proc
        self.sock = spawned.sock
        self.channel: LoopChannel | None = None

    def send(self, message: Message) -> None:
        if self.channel is None:
            raise ChannelClosed("the stub's channel is not open")
        self.channel.send(message)


class StubPython:
    """One instance of a Triton python model, in a stub process."""

    gil_bound = False  # its GIL is the stub's: never run on the event loop
    used_image = False

    def __init__(self) -> None:
        self.timings = ExecTimings()
        self._host: ServerHost | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._services: StubServices | None = None
        self._python = Path()
        self._cleanup: Path | None = None
        self._init: dict[str, Any] = {}
        self._name = self._version = self._instance = ""
        self._declared: dict[str, str] = {}
        self._decoupled = False
        self._iterative = False  # sequence_batching { iterative_sequence }: may reschedule
        # The fields below are touched on the loop only.
        self._stub: _Stub | None = None
        self._exec_id = 0
        self._pending: dict[int, asyncio.Future[Message | None]] = {}
        self._sinks: dict[tuple[int, int], InferRequest] = {}
        # Non-decoupled requests (Triton's response sender, below): each execute's requests
        # until its answer; the responses their senders sent before it; and those whose
        # response will come after it (the model returned None for them).
        self._executing: dict[int, list[InferRequest]] = {}
        self._answered: dict[tuple[int, int], InferResponse | ServingError] = {}
        self._waiting: dict[tuple[int, int], tuple[asyncio.Future[Any], InferRequest]] = {}
        self._unloading = False
        self._initializing: asyncio.Future[Message | None] | None = None
        self._restart: asyncio.Task[None] | None = None
        # The native front relaying this instance's stub socket (decision 0032), once it does.
        self._relay: StubRelay | None = None

    # -- lifecycle (load and unload run in a loader thread; the stub itself on the loop) -----

    def load(self, ctx: LoadContext) -> None:
        host = current_server_host()
        self._host, self._loop, self._services = host, host.loop, StubServices(host)
        self._name, self._version = ctx.model_name, ctx.version
        self._instance = ctx.instance_name or f"{ctx.model_name}_0_0"
        self._declared = output_types(ctx.config)
        self._decoupled = ctx.config.model_transaction_policy.decoupled
        self._iterative = ctx.config.sequence_batching.iterative_sequence
        self._python, self._cleanup = stub_python(execution_env_path(ctx.config), ctx.model_dir)
        model_file = ctx.model_file or ctx.version_dir / "model.py"
        self._init = {
            "op": "init",
            "model_file": str(model_file),
            "decoupled": self._decoupled,
            "args": model_args(ctx),
        }
        try:
            self._on_loop(self._start())
        except BaseException:
            self._remove_env()
            raise

    def unload(self) -> None:
        if self._loop_running():
            stub = self._on_loop(self._finalize())
        else:  # the server's loop has stopped: say goodbye on the socket itself
            self._unloading, stub = True, self._stub
            if stub is not None:
                _finalize_directly(stub)
        if stub is not None:
            try:
                stub.proc.wait(_FINALIZE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                stub.proc.kill()
                stub.proc.wait()
            if self._loop_running():
                self._on_loop(self._close(stub))
            elif stub.channel is None or not stub.channel.closed:
                stub.sock.close()
        self._remove_env()

    def _loop_running(self) -> bool:
        return self._loop is not None and self._loop.is_running()

    def _on_loop(self, coroutine: Any) -> Any:
        """Run a coroutine on the server's loop and wait for it (from a loader thread)."""
        loop, host = self._loop, self._host
        if loop is None or host is None or host.in_loop_thread():
            coroutine.close()
            raise ServingError(f"model '{self._name}': a stub is driven from the event loop")
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result()

    async def _finalize(self) -> _Stub | None:
        self._unloading = True
        if self._relay is not None:
            # The front sends this instance no more executes, and has the answers of those it
            # sent, before the model's finalize() runs.
            with contextlib.suppress(ConnectionError, TimeoutError):
                await self._relay.retire_instance(self._name, self._version, self._instance)
        stub = self._stub
        if stub is not None:
            with contextlib.suppress(ChannelClosed):
                stub.send(Message({"op": "finalize"}))
        return stub

    async def _close(self, stub: _Stub) -> None:
        if stub.channel is not None:
            stub.channel.close()

    def _remove_env(self) -> None:
        if self._cleanup is not None:
            shutil.rmtree(self._cleanup, ignore_errors=True)
            self._cleanup = None

    async def _start(self) -> None:
        """Start a stub, read it on the loop, initialize the model in it; RepositoryError if
        it does not come up. The channel reads from the start: `initialize` may already create
        metrics, log, or call BLS."""
        loop = asyncio.get_running_loop()
        spares = self._host.spares if self._host is not None else None
        spawned = spares.take(self._python) if spares is not None else None
        started_ahead = spawned is not None
        if spawned is None:  # none started ahead (or not of this interpreter): start one now
            spawned = await asyncio.to_thread(spawn, self._python, self._name)
        stub = _Stub(spawned)
        self._initializing = initializing = loop.create_future()
        stub.channel = LoopChannel(
            stub.sock,
            loop,
            on_message=functools.partial(self._dispatch, stub),
            on_closed=functools.partial(self._died, stub),
        )
        reply: Message | None = None
        try:
            stub.send(Message(self._init))
            reply = await asyncio.wait_for(asyncio.shield(initializing), _START_TIMEOUT_S)
        except (ChannelClosed, TimeoutError) as exc:
            logger.warning("model=%s stub did not start: %r", self._name, exc)
        if stub.channel.closed:  # it died right after saying ready
            reply = None
        if reply is None or reply.fields.get("op") != "ready":
            stub.channel.close()
            stub.proc.kill()
            await asyncio.to_thread(stub.proc.wait)
            why = (
                reply.fields.get("error", "its stub did not start")
                if reply is not None
                # Triton's words first (its L0_backend_python greps for them), then how.
                else f"Stub process '{self._instance}' is not healthy. (it exited during "
                f"initialize, status {stub.proc.returncode})"
            )
            raise RepositoryError(f"model '{self._name}' version {self._version}: {why}")
        self._stub = stub
        if self._relay is not None:  # a stub started again after one died: relayed as it was
            self._splice(self._relay)
        logger.info(
            "model=%s instance %s: stub pid %d ready%s", self._name, self._instance,
            stub.proc.pid, " (a spare, started ahead)" if started_ahead else "",
        )  # fmt: skip

    async def relay_through(self, relay: StubRelay) -> None:
        """From now on this instance's stub socket goes through the native front's relay
        (runtime.process.front_control), which answers the executes it sends itself; so
        does the socket of every stub started for this instance after (one that died)."""
        self._relay = relay
        self._splice(relay)

    def _splice(self, relay: StubRelay) -> None:
        stub = self._stub
        if stub is None or stub.channel is None or stub.channel.closed:
            return
        try:
            relayed = relay.relay(self._name, self._version, self._instance, stub.sock)
        except ConnectionError as exc:
            logger.warning("model=%s: the native front does not relay its stub: %s",
                           self._name, exc)  # fmt: skip
            return
        former = stub.channel.splice(relayed)
        stub.sock = relayed
        former.close()  # the front holds its own copy
        logger.info("model=%s instance %s: its stub is relayed by the native front",
                    self._name, self._instance)  # fmt: skip

    # -- execute ------------------------------------------------------------------------------

    def execute(self, requests: list[InferRequest]) -> list[InferResponse | ServingError]:
        """`execute_async`, from a thread that is not the loop's (warm-up, sequence slots)."""
        return list(self._on_loop(self.execute_async(requests)))

    async def execute_async(
        self, requests: list[InferRequest]
    ) -> list[InferResponse | ServingError]:
        """One round trip to the stub, on the event loop. Several may be in flight (the
        scheduler pipelines single requests); the stub runs them one at a time, in order."""
        t0 = time.perf_counter_ns()
        while True:
            stub, restart = self._stub, self._restart
            if stub is None or stub.channel is None:
                if restart is not None and not restart.done():
                    # A new stub is starting: wait for it, as Triton's queue waits for its
                    # instance (only the requests the dead stub held fail).
                    await asyncio.shield(restart)
                    continue
                return self._unhealthy(requests)
            exec_id, future = self._register(requests)
            message, input_bytes = _execute_message(exec_id, requests)
            try:
                if input_bytes > _ENCODE_OFF_LOOP_BYTES:
                    stub.channel.send_encoded(await asyncio.to_thread(encode, message))
                else:
                    stub.channel.send(message)
            except ChannelClosed:
                self._forget(exec_id, len(requests))
                return self._unhealthy(requests)
            t1 = time.perf_counter_ns()
            reply = await future
            if reply is not _RETRY:
                break
            # The stub died before it started this one: run it on the stub started next (the
            # loop above waits for it).
        t2 = time.perf_counter_ns()
        results, waits = self._results(exec_id, requests, reply)
        if waits:
            await self._await_senders(exec_id, results, waits)
            t2 = time.perf_counter_ns()  # the late responses are the model's time
        self.timings = ExecTimings(t1 - t0, t2 - t1, time.perf_counter_ns() - t2)
        return results

    def _register(self, requests: list[InferRequest]) -> tuple[int, asyncio.Future[Message | None]]:
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

    def _forget(self, exec_id: int, count: int) -> None:
        self._pending.pop(exec_id, None)
        self._executing.pop(exec_id, None)
        for index in range(count):
            self._sinks.pop((exec_id, index), None)

    def _unhealthy_one(self) -> ServingError:
        return execute_failure(self._instance, f"Stub process '{self._instance}' is not healthy.")

    def _unhealthy(self, requests: list[InferRequest]) -> list[InferResponse | ServingError]:
        error = self._unhealthy_one()
        for request in requests:
            if request.response_sink is not None:
                request.response_sink.send(error, final=True)
        return [error for _ in requests]

    def _results(
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
            self._forget(exec_id, len(requests))
            return self._with_early(self._unhealthy(requests), early), []
        error = reply.fields.get("error")
        if error is not None:
            self._forget(exec_id, len(requests))
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

    async def _await_senders(
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

    def _dispatch(self, stub: _Stub, message: Message) -> None:
        try:
            self._route(stub, message)
        except (ValueError, KeyError, TypeError) as exc:
            logger.error(
                "model=%s stub %s sent a malformed message: %r", self._name, self._instance, exc
            )
            stub.proc.kill()  # its channel closes: _died runs

    def _route(self, stub: _Stub, message: Message) -> None:
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
            initializing = self._initializing
            if initializing is not None and not initializing.done():
                initializing.set_result(message)
        elif op != "finalized":
            raise ValueError(f"unknown op {op!r}")

    def _reply_cancelled(self, stub: _Stub, message: Message) -> None:
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

    def _died(self, stub: _Stub) -> None:
        """The stub's channel closed: fail what it held, start another unless unloading."""
        stub.proc.poll()
        initializing = self._initializing
        if initializing is not None and not initializing.done():
            initializing.set_result(None)  # died while starting: _start reports it
            return
        if self._stub is not stub:
            return
        self._stub = None
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
                future.set_result(None if exec_id == running or self._unloading else _RETRY)
        error = execute_failure(self._instance, f"Stub process '{self._instance}' is not healthy.")
        for (exec_id, _), request in sinks.items():
            if running is not None and exec_id > running and not self._unloading:
                continue  # registered again when retried
            if request.response_sink is not None:
                request.response_sink.send(error, final=True)
        if self._unloading:
            return
        self._restart = asyncio.get_running_loop().create_task(self._restarted(stub))

    async def _restarted(self, stub: _Stub) -> None:
        status = await asyncio.to_thread(stub.proc.wait)
        logger.warning(
            "model=%s instance %s: stub pid %d exited with status %s; restarting it",
            self._name, self._instance, stub.proc.pid, status,
        )  # fmt: skip
        try:
            await self._start()
        except ServingError as exc:
            logger.error(
                "model=%s instance %s: restart failed: %s", self._name, self._instance, exc.message
            )


def _finalize_directly(stub: _Stub) -> None:
    encoded = encode(Message({"op": "finalize"}))
    try:
        transmit(stub.sock, encoded)
    except (BlockingIOError, ChannelClosed):
        stub.proc.kill()
    finally:
        encoded.close()


def _execute_message(exec_id: int, requests: list[InferRequest]) -> tuple[Message, int]:
    """The execute message of a batch, and the bytes its input tensors hold."""
    specs, tensors, nbytes = [], [], 0
    for request in requests:
        spec = {
            "id": request.id or "",
            "model": request.model_name,
            "params": model_parameters(request),
            "outputs": [o.name for o in request.requested_outputs],
            "correlation_id": request.parameters.get("sequence_id", 0),
            "flags": request_flags(request),
            "n": len(request.inputs),
        }
        if request.trace is not None and request.trace.sampled:
            spec["trace"] = request.trace.id  # its model's BLS calls name it: children
        specs.append(spec)
        for t in request.inputs:
            data, shape = t.data, tuple(t.shape)
            if data.shape != shape:
                data = np.asarray(data).reshape(shape)
            nbytes += data.nbytes
            tensors.append(Tensor(t.name, t.datatype, shape, data))
    return Message({"op": "execute", "id": exec_id, "requests": specs}, tensors), nbytes
