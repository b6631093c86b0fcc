"""A Python model instance in its own stub process, as Triton's python backend runs them.

    worker thread ── execute ─▶ channel ─▶ stub process (its own interpreter and GIL)
                ◀── done ◀── reader thread ◀──┘   (also: decoupled sends → each request's
                                                    sink; BLS and calls → the server's host)

`execute` blocks its instance's worker thread until the stub answers; meanwhile the reader
thread serves what the model asks of the server (BLS on the event loop, custom metrics, logs).
If the stub dies (a segfault, `os._exit`), its in-flight requests fail with Triton's error,
the reader starts a new stub (initialize again), and the server keeps serving.
`EXECUTION_ENV_PATH` (a directory or a tarball holding `bin/python`) picks the interpreter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np

import runtime
from runtime import triton_python_backend_utils as pb_utils
from runtime.backends.base import ExecTimings, LoadContext
from runtime.backends.python_backend import (
    _ERROR_CLASSES,
    execute_failure,
    model_args,
    output_types,
)
from runtime.errors import RepositoryError, ServingError
from runtime.inference import InferRequest, InferResponse, InferTensor, RequestedOutput
from runtime.pystub.protocol import split
from runtime.pystub.wire import Channel, ChannelClosed, Message, Tensor, channel_pair
from runtime.python_host import LOG_LEVELS
from runtime.python_placement import execution_env_path
from runtime.server_host import ServerHost, current_server_host

__all__ = ["StubPython", "stub_python"]

logger = logging.getLogger(__name__)
_model_log = logging.getLogger("triton_python_backend_utils")

_START_TIMEOUT_S = 300.0  # initialize() may load weights; Triton's stub timeout is shorter
_FINALIZE_TIMEOUT_S = 30.0
_PROJECT_ROOT = Path(runtime.__file__).resolve().parent.parent


def stub_python(config_env: str | None, model_dir: Path) -> tuple[Path, Path | None]:
    """The interpreter for a model's stubs, and a directory to remove at unload (an unpacked
    tarball). `config_env` is EXECUTION_ENV_PATH as written."""
    if config_env is None:
        return Path(sys.executable), None
    path = Path(config_env.replace("$$TRITON_MODEL_DIRECTORY", str(model_dir)))
    cleanup = None
    if path.is_file() and tarfile.is_tarfile(path):
        cleanup = Path(tempfile.mkdtemp(prefix="thaw-env-"))
        try:
            with tarfile.open(path) as archive:
                archive.extractall(cleanup, filter="data")
        except (tarfile.TarError, OSError) as exc:
            shutil.rmtree(cleanup, ignore_errors=True)
            raise RepositoryError(f"EXECUTION_ENV_PATH {path}: cannot unpack: {exc}") from exc
        path = cleanup
    for name in ("bin/python3", "bin/python"):
        if (path / name).is_file():
            return path / name, cleanup
    if cleanup is not None:
        shutil.rmtree(cleanup, ignore_errors=True)
    raise RepositoryError(
        f"EXECUTION_ENV_PATH {config_env!r}: {path} holds no bin/python (a Python environment "
        "directory, or a tarball of one such as conda-pack makes, is needed)"
    )


class _Stub:
    """One running stub process and its channel."""

    def __init__(self, proc: subprocess.Popen[bytes], channel: Channel) -> None:
        self.proc = proc
        self.channel = channel


class StubPython:
    """One instance of a Triton python model, in a stub process."""

    gil_bound = False  # its GIL is the stub's: never run on the event loop
    used_image = False

    def __init__(self) -> None:
        self.timings = ExecTimings()
        self._host: ServerHost | None = None
        self._python = Path(sys.executable)
        self._cleanup: Path | None = None
        self._init: dict[str, Any] = {}
        self._name = self._version = self._instance = ""
        self._declared: dict[str, str] = {}
        self._decoupled = False
        self._stub: _Stub | None = None
        self._lock = threading.Lock()  # guards the fields below and stub replacement
        self._exec_id = 0
        self._pending: dict[int, Future[Message | None]] = {}
        self._sinks: dict[tuple[int, int], InferRequest] = {}
        self._unloading = False
        self._initializing: Future[Message | None] = Future()  # the starting stub's answer

    # -- lifecycle ----------------------------------------------------------------------------

    def load(self, ctx: LoadContext) -> None:
        self._host = current_server_host()
        self._name, self._version = ctx.model_name, ctx.version
        self._instance = ctx.instance_name or f"{ctx.model_name}_0_0"
        self._declared = output_types(ctx.config)
        self._decoupled = ctx.config.model_transaction_policy.decoupled
        self._python, self._cleanup = stub_python(execution_env_path(ctx.config), ctx.model_dir)
        model_file = ctx.model_file or ctx.version_dir / "model.py"
        self._init = {
            "op": "init",
            "model_file": str(model_file),
            "decoupled": self._decoupled,
            "args": model_args(ctx),
        }
        try:
            self._start()
        except BaseException:
            self._remove_env()
            raise

    def unload(self) -> None:
        with self._lock:
            self._unloading = True
            stub = self._stub
        if stub is not None:
            try:
                stub.channel.send(Message({"op": "finalize"}))
                stub.proc.wait(_FINALIZE_TIMEOUT_S)
            except (ChannelClosed, subprocess.TimeoutExpired):
                stub.proc.kill()
                stub.proc.wait()
            stub.channel.close()
        self._remove_env()

    def _remove_env(self) -> None:
        if self._cleanup is not None:
            shutil.rmtree(self._cleanup, ignore_errors=True)
            self._cleanup = None

    def _spawn(self) -> _Stub:
        server_end, stub_end = channel_pair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_PROJECT_ROOT), env.get("PYTHONPATH", "")) if p
        )
        env["THAW_STUB_LOG_LEVEL"] = logging.getLevelName(logging.getLogger().getEffectiveLevel())
        if self._python != Path(sys.executable):
            env["PATH"] = f"{self._python.parent}{os.pathsep}{env.get('PATH', '')}"
        try:
            proc = subprocess.Popen(
                [str(self._python), "-m", "runtime.pystub.stub_main", str(stub_end.fileno())],
                pass_fds=(stub_end.fileno(),),
                env=env,
                stdin=subprocess.DEVNULL,
            )
        except OSError as exc:
            server_end.close()
            raise RepositoryError(f"model '{self._name}': cannot start its stub: {exc}") from exc
        finally:
            stub_end.close()
        return _Stub(proc, Channel(server_end))

    def _start(self) -> None:
        """Start a stub, start its reader, initialize the model in it (blocking).

        The reader runs from the start: `initialize` may already create metrics and log."""
        stub = self._spawn()
        with self._lock:
            self._initializing = Future()
            initializing = self._initializing
        threading.Thread(
            target=self._read, args=(stub,), name=f"stub-{self._instance}", daemon=True
        ).start()
        try:
            stub.channel.send(Message(self._init))
            reply = initializing.result(_START_TIMEOUT_S)
        except (ChannelClosed, TimeoutError) as exc:
            reply = None
            logger.warning("model=%s stub did not start: %r", self._name, exc)
        if reply is None or reply.fields.get("op") != "ready":
            stub.proc.kill()
            stub.proc.wait()
            why = (
                reply.fields.get("error", "its stub did not start")
                if reply is not None
                else f"its stub process exited during initialize (status {stub.proc.returncode})"
            )
            raise RepositoryError(f"model '{self._name}' version {self._version}: {why}")
        with self._lock:
            self._stub = stub
        logger.info(
            "model=%s instance %s: stub pid %d ready", self._name, self._instance, stub.proc.pid
        )

    # -- execute (the instance's worker thread) -------------------------------------------------

    def execute(self, requests: list[InferRequest]) -> list[InferResponse | ServingError]:
        t0 = time.perf_counter_ns()
        with self._lock:
            stub = self._stub
            self._exec_id += 1
            exec_id = self._exec_id
            future: Future[Message | None] = Future()
            self._pending[exec_id] = future
            if self._decoupled:
                for index, request in enumerate(requests):
                    if request.response_sink is not None:
                        self._sinks[(exec_id, index)] = request
        if stub is None:
            self._forget(exec_id, len(requests))
            return self._unhealthy(requests)
        try:
            stub.channel.send(_execute_message(exec_id, requests))
        except ChannelClosed:
            self._forget(exec_id, len(requests))
            return self._unhealthy(requests)
        t1 = time.perf_counter_ns()
        reply = future.result()
        t2 = time.perf_counter_ns()
        results = self._results(exec_id, requests, reply)
        self.timings = ExecTimings(t1 - t0, t2 - t1, time.perf_counter_ns() - t2)
        return results

    def _forget(self, exec_id: int, count: int) -> None:
        with self._lock:
            self._pending.pop(exec_id, None)
            for index in range(count):
                self._sinks.pop((exec_id, index), None)

    def _unhealthy(self, requests: list[InferRequest]) -> list[InferResponse | ServingError]:
        error = execute_failure(self._instance, f"Stub process '{self._instance}' is not healthy.")
        for request in requests:
            if request.response_sink is not None:
                request.response_sink.send(error, final=True)
        return [error for _ in requests]

    def _results(
        self, exec_id: int, requests: list[InferRequest], reply: Message | None
    ) -> list[InferResponse | ServingError]:
        if reply is None:  # the stub died with this execute in flight
            self._forget(exec_id, len(requests))
            return self._unhealthy(requests)
        error = reply.fields.get("error")
        if error is not None:
            self._forget(exec_id, len(requests))
            failure = execute_failure(self._instance, str(error))
            return [failure for _ in requests]
        if self._decoupled:
            return [
                InferResponse(self._name, self._version, [], id=r.id, flag_only=True)
                for r in requests
            ]
        rows = reply.fields.get("responses", [])
        groups = split(reply.tensors, [int(row.get("n", 0)) for row in rows])
        out: list[InferResponse | ServingError] = []
        for request, row, tensors in zip(requests, rows, groups, strict=True):
            out.append(self._response(request.id, row, tensors))
        return out

    def _response(
        self, request_id: str | None, row: dict[str, Any] | None, tensors: list[Tensor]
    ) -> InferResponse | ServingError:
        if row is None or row.get("none"):
            return ServingError(f"model '{self._name}' sent no response for a request")
        if "error" in row:
            cls = _ERROR_CLASSES.get(int(row.get("code", 1)), ServingError)
            return cls(str(row["error"]))
        outputs = []
        for t in tensors:
            datatype = (
                "BF16"
                if self._declared.get(t.name) == "BF16" and t.datatype == "UINT16"
                else t.datatype
            )
            outputs.append(InferTensor(t.name, datatype, t.shape, t.data))
        return InferResponse(
            self._name, self._version, outputs, id=request_id, parameters=row.get("params") or {}
        )

    # -- the reader thread ----------------------------------------------------------------------

    def _read(self, stub: _Stub) -> None:
        try:
            while True:
                message = stub.channel.recv()
                self._dispatch(stub, message)
        except ChannelClosed:
            pass  # the stub exited (or crashed): _died below
        except (ValueError, KeyError, TypeError) as exc:
            logger.error(
                "model=%s stub %s sent a malformed message: %r", self._name, self._instance, exc
            )
            stub.proc.kill()
        self._died(stub)

    def _dispatch(self, stub: _Stub, message: Message) -> None:
        op = message.fields.get("op")
        if op in ("ready", "failed"):
            with self._lock:
                initializing = self._initializing
            if not initializing.done():
                initializing.set_result(message)
        elif op == "done":
            with self._lock:
                future = self._pending.pop(int(message.fields["id"]), None)
            if future is not None:
                future.set_result(message)
        elif op == "send":
            self._send(message)
        elif op == "bls":
            assert self._host is not None
            self._host.submit(self._bls(stub, message))
        elif op == "call":
            self._call(stub, message)
        elif op == "log":
            level = LOG_LEVELS.get(int(message.fields.get("level", 0)), logging.INFO)
            _model_log.log(level, "%s", message.fields.get("message", ""))
        elif op == "finalized":
            pass
        else:
            raise ValueError(f"unknown op {op!r}")

    def _send(self, message: Message) -> None:
        exec_id, index = (int(k) for k in message.fields["key"])
        final = bool(message.fields.get("final"))
        with self._lock:
            request = self._sinks.get((exec_id, index))
            if final:
                self._sinks.pop((exec_id, index), None)
        sink = request.response_sink if request is not None else None
        if sink is None:
            return
        row = message.fields.get("response")
        if row is None:
            sink.send(None, final=final)
            return
        item = self._response(request.id if request is not None else None, row, message.tensors)
        sink.send(item, final=final)

    def _died(self, stub: _Stub) -> None:
        """The stub's channel closed: fail what it held, start another unless unloading."""
        stub.proc.wait()
        stub.channel.close()
        with self._lock:
            if not self._initializing.done():  # died while starting: _start reports it
                self._initializing.set_result(None)
                return
            if self._stub is not stub:
                return
            self._stub = None
            pending, self._pending = self._pending, {}
            sinks, self._sinks = self._sinks, {}
            unloading = self._unloading
        for future in pending.values():
            future.set_result(None)
        error = execute_failure(self._instance, f"Stub process '{self._instance}' is not healthy.")
        for request in sinks.values():
            if request.response_sink is not None:
                request.response_sink.send(error, final=True)
        if unloading:
            return
        logger.warning(
            "model=%s instance %s: stub pid %d exited with status %s; restarting it",
            self._name, self._instance, stub.proc.pid, stub.proc.returncode,
        )  # fmt: skip
        try:
            self._start()
        except ServingError as exc:
            logger.error(
                "model=%s instance %s: restart failed: %s", self._name, self._instance, exc.message
            )

    # -- what the model asks of the server ------------------------------------------------------

    async def _bls(self, stub: _Stub, message: Message) -> None:
        assert self._host is not None
        fields = message.fields
        spec = fields["request"]
        version = spec.get("version", -1)
        request = InferRequest(
            model_name=str(spec["model"]),
            model_version="" if version in (-1, None, "") else str(version),
            inputs=[InferTensor(t.name, t.datatype, t.shape, t.data) for t in message.tensors],
            requested_outputs=[RequestedOutput(name) for name in spec.get("outputs", [])],
            id=spec.get("id") or None,
            parameters=dict(spec.get("params") or {}),
        )
        if spec.get("correlation_id"):
            request.parameters.setdefault("sequence_id", spec["correlation_id"])
        timeout_us = int(fields.get("timeout_us") or 0)
        reply = {"op": "bls_response", "bls": fields["bls"]}
        try:
            async with asyncio.timeout(timeout_us / 1e6 if timeout_us else None):
                if fields.get("decoupled"):
                    async for response in self._host.stream_async(request):
                        self._reply(stub, {**reply, "final": False}, response)
                    self._reply(stub, {**reply, "final": True, "flag_only": True}, None)
                else:
                    self._reply(
                        stub, {**reply, "final": True}, await self._host.infer_async(request)
                    )
        except TimeoutError:
            self._reply_error(
                stub, reply, "Request timeout expired", pb_utils.TritonError.UNAVAILABLE
            )
        except ServingError as exc:
            code = {v: k for k, v in _ERROR_CLASSES.items()}.get(
                type(exc), pb_utils.TritonError.INTERNAL
            )
            self._reply_error(stub, reply, exc.message, code)

    def _reply(self, stub: _Stub, fields: dict[str, Any], response: InferResponse | None) -> None:
        tensors: list[Tensor] = []
        if response is not None and not response.flag_only:
            tensors = [Tensor(t.name, t.datatype, t.shape, t.data) for t in response.outputs]
            fields = {
                **fields,
                "response": {"params": dict(response.parameters), "n": len(tensors)},
            }
        elif response is not None:
            fields = {**fields, "response": None}
        with contextlib.suppress(ChannelClosed):
            stub.channel.send(Message(fields, tensors))

    def _reply_error(self, stub: _Stub, reply: dict[str, Any], message: str, code: int) -> None:
        with contextlib.suppress(ChannelClosed):
            stub.channel.send(
                Message({**reply, "final": True, "response": {"error": message, "code": code}})
            )

    def _call(self, stub: _Stub, message: Message) -> None:
        assert self._host is not None
        host = self._host
        fn, args, ident = (
            message.fields["fn"],
            message.fields.get("args", []),
            message.fields["call"],
        )
        handlers: dict[str, Callable[..., Any]] = {
            "metric_family": host.metric_family,
            "metric_create": host.metric_create,
            "metric_update": host.metric_update,
            "metric_value": host.metric_value,
            "is_model_ready": host.is_model_ready,
        }
        reply: dict[str, Any] = {"op": "reply", "call": ident}
        if fn in ("load_model", "unload_model"):
            threading.Thread(
                target=self._model_call, args=(stub, reply, fn, args), daemon=True
            ).start()
            return
        try:
            reply["value"] = handlers[fn](*args)
        except KeyError:
            reply["error"] = f"unknown call {fn!r}"
        except (ValueError, TypeError) as exc:
            reply["error"] = str(exc)
        with contextlib.suppress(ChannelClosed):
            stub.channel.send(Message(reply))

    def _model_call(self, stub: _Stub, reply: dict[str, Any], fn: str, args: list[Any]) -> None:
        assert self._host is not None
        try:
            if fn == "load_model":
                self._host.load_model(str(args[0]), str(args[1]), None)
            else:
                self._host.unload_model(str(args[0]), bool(args[1]))
            reply["value"] = None
        except pb_utils.TritonModelException as exc:
            reply["error"] = exc.message()
        with contextlib.suppress(ChannelClosed):
            stub.channel.send(Message(reply))


def _execute_message(exec_id: int, requests: list[InferRequest]) -> Message:
    specs, tensors = [], []
    for request in requests:
        specs.append(
            {
                "id": request.id or "",
                "model": request.model_name,
                "params": request.parameters,
                "outputs": [o.name for o in request.requested_outputs],
                "correlation_id": request.parameters.get("sequence_id", 0),
                "n": len(request.inputs),
            }
        )
        for t in request.inputs:
            data = t.data if t.data.shape == tuple(t.shape) else np.asarray(t.data).reshape(t.shape)
            tensors.append(Tensor(t.name, t.datatype, tuple(t.shape), data))
    return Message({"op": "execute", "id": exec_id, "requests": specs}, tensors)
