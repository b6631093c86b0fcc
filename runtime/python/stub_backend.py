"""A Python model instance in its own stub process, as Triton's python backend runs them.

    event loop ── execute_async ─▶ LoopChannel ─▶ stub process (its own interpreter and GIL)
               ◀── done ◀── add_reader ◀──────────┘   (also: sender sends → each request's
                                                       sink or answer; is_cancelled → the
                                                       request; BLS and calls → StubServices)

Where each of the stub's messages goes (an execute's answer, a request's responses, what it
asks of the server) is runtime.python.stub_answers'; this module is the instance's lifecycle:
its stub started, relayed, restarted when it dies, finalized.

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
from runtime.inference import InferRequest, InferResponse
from runtime.python.loop_channel import LoopChannel
from runtime.python.model_io import model_args, model_parameters, output_types, request_flags
from runtime.python.placement import execution_env_path
from runtime.python.server_host import ServerHost, current_server_host
from runtime.python.stub.wire import ChannelClosed, Message, Tensor, encode, transmit
from runtime.python.stub_answers import RETRY, StubAnswers
from runtime.python.stub_process import SpawnedStub, spawn, stub_python
from runtime.python.stub_services import StubServices

__all__ = ["StubPython", "stub_python"]

logger = logging.getLogger(__name__)

_START_TIMEOUT_S = 300.0  # initialize() may load weights; Triton's stub timeout is shorter
_FINALIZE_TIMEOUT_S = 30.0
# Inputs over this many bytes are written to their memfds in a thread, not on the loop.
_ENCODE_OFF_LOOP_BYTES = 1 << 20


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
        self._python = Path()
        self._cleanup: Path | None = None
        self._init: dict[str, Any] = {}
        self._name = self._version = self._instance = ""
        # The fields below are touched on the loop only.
        self._stub: _Stub | None = None
        # The executes in flight and where the stub's messages go (made anew by `load`).
        self._answers = StubAnswers()
        self._unloading = False
        self._restart: asyncio.Task[None] | None = None
        # The native front relaying this instance's stub socket (decision 0032), once it does.
        self._relay: StubRelay | None = None

    # -- lifecycle (load and unload run in a loader thread; the stub itself on the loop) -----

    def load(self, ctx: LoadContext) -> None:
        host = current_server_host()
        self._host, self._loop = host, host.loop
        self._name, self._version = ctx.model_name, ctx.version
        self._instance = ctx.instance_name or f"{ctx.model_name}_0_0"
        decoupled = ctx.config.model_transaction_policy.decoupled
        self._answers = StubAnswers(
            StubServices(host),
            name=self._name,
            version=self._version,
            instance=self._instance,
            declared=output_types(ctx.config),
            decoupled=decoupled,
            iterative=ctx.config.sequence_batching.iterative_sequence,
            loop=host.loop,
        )
        self._python, self._cleanup = stub_python(execution_env_path(ctx.config), ctx.model_dir)
        model_file = ctx.model_file or ctx.version_dir / "model.py"
        self._init = {
            "op": "init",
            "model_file": str(model_file),
            "decoupled": decoupled,
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
        self._answers.initializing = initializing = loop.create_future()
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
        answers = self._answers
        while True:
            stub, restart = self._stub, self._restart
            if stub is None or stub.channel is None:
                if restart is not None and not restart.done():
                    # A new stub is starting: wait for it, as Triton's queue waits for its
                    # instance (only the requests the dead stub held fail).
                    await asyncio.shield(restart)
                    continue
                return answers.unhealthy(requests)
            exec_id, future = answers.register(requests)
            message, input_bytes = _execute_message(exec_id, requests)
            try:
                if input_bytes > _ENCODE_OFF_LOOP_BYTES:
                    stub.channel.send_encoded(await asyncio.to_thread(encode, message))
                else:
                    stub.channel.send(message)
            except ChannelClosed:
                answers.forget(exec_id, len(requests))
                return answers.unhealthy(requests)
            t1 = time.perf_counter_ns()
            reply = await future
            if reply is not RETRY:
                break
            # The stub died before it started this one: run it on the stub started next (the
            # loop above waits for it).
        t2 = time.perf_counter_ns()
        results, waits = answers.results(exec_id, requests, reply)
        if waits:
            await answers.await_senders(exec_id, results, waits)
            t2 = time.perf_counter_ns()  # the late responses are the model's time
        self.timings = ExecTimings(t1 - t0, t2 - t1, time.perf_counter_ns() - t2)
        return results

    # -- the stub's messages (the loop's reader callback) --------------------------------------

    def _dispatch(self, stub: _Stub, message: Message) -> None:
        try:
            self._answers.route(stub, message)
        except (ValueError, KeyError, TypeError) as exc:
            logger.error(
                "model=%s stub %s sent a malformed message: %r", self._name, self._instance, exc
            )
            stub.proc.kill()  # its channel closes: _died runs

    def _died(self, stub: _Stub) -> None:
        """The stub's channel closed: fail what it held, start another unless unloading."""
        stub.proc.poll()
        initializing = self._answers.initializing
        if initializing is not None and not initializing.done():
            initializing.set_result(None)  # died while starting: _start reports it
            return
        if self._stub is not stub:
            return
        self._stub = None
        self._answers.stub_died(unloading=self._unloading)
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
