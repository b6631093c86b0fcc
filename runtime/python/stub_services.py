"""What a stub process asks of the server: BLS requests, calls (custom metrics, the model
loading API) and logs, answered on the event loop over the stub's channel.

    bls {bls, decoupled, timeout_us, request} + inputs ─▶ ServerHost.infer_async | stream_async
                                                       ─▶ bls_response {bls, final, response?}
    call {call, fn, args} ─▶ metrics / is_model_ready (on the loop), load / unload (a thread);
         + files           a load's override files: UINT8 tensors named by their keys
                          ─▶ reply {call, value? | error?}
    log {level, message}  ─▶ the `triton_python_backend_utils` logger
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any

from runtime.errors import ServingError, as_serving_error
from runtime.inference import InferRequest, InferResponse, InferTensor, RequestedOutput
from runtime.python import pb_utils
from runtime.python.host import log_model_line
from runtime.python.server_host import (
    BLS_ERROR_CODE,
    ServerHost,
    bls_error_text,
    bls_trace,
    with_sequence,
)
from runtime.python.stub.wire import ChannelClosed, Message, Tensor

__all__ = ["Send", "StubServices"]

# The model loading API: each answered from a thread of its own (readiness only when it asks
# the front door: ServerHost.asks_platform).
_MODEL_CALLS = ("load_model", "unload_model", "is_model_ready")


# Sends one message to the stub (its current channel); raises ChannelClosed when it is gone.
Send = Callable[[Message], None]


def _plain_file_name(name: str) -> bool:
    return 0 < len(name) <= 255 and name.isprintable() and "/" not in name


class StubServices:
    """The server's side of a stub's requests; every method runs on the event loop."""

    def __init__(self, host: ServerHost) -> None:
        self._host = host
        self._tasks: set[asyncio.Task[None]] = set()

    def log(self, message: Message) -> None:
        """A model's `pb_utils.Logger` line; its file and line named only when they are a
        plain file name and a line number (the stub's fields; a record stays one line)."""
        fields = message.fields
        level, file, line = fields.get("level"), fields.get("file"), fields.get("line")
        where = None
        if isinstance(file, str) and type(line) is int and _plain_file_name(file):
            where = (file, line)
        level = level if type(level) is int else 0  # INFO
        log_model_line(level, str(fields.get("message", "")), where)

    def bls(self, send: Send, message: Message) -> None:
        """Start a BLS request on the loop; its responses go back through `send`."""
        task = asyncio.get_running_loop().create_task(self._bls(send, message))
        self._tasks.add(task)  # held until done: the loop keeps only weak references
        task.add_done_callback(self._tasks.discard)

    async def _bls(self, send: Send, message: Message) -> None:
        fields = message.fields
        spec = fields["request"]
        version = spec.get("version", -1)
        request = InferRequest(
            model_name=str(spec["model"]),
            model_version="" if version in (-1, None, "") else str(version),
            inputs=[InferTensor(t.name, t.datatype, t.shape, t.data) for t in message.tensors],
            # a name asked for twice is one output, as Triton's request keeps a set of them
            requested_outputs=[RequestedOutput(n) for n in dict.fromkeys(spec.get("outputs", []))],
            id=spec.get("id") or None,
            parameters=with_sequence(
                dict(spec.get("params") or {}),
                spec.get("correlation_id"),
                int(spec.get("flags") or 0),
            ),
        )
        parent = self._host.live_trace(spec.get("trace"))
        request.trace = bls_trace(parent, request.model_name, request.id or "")
        timeout_us = int(fields.get("timeout_us") or 0)
        reply = {"op": "bls_response", "bls": fields["bls"]}
        try:
            async with asyncio.timeout(timeout_us / 1e6 if timeout_us else None):
                if fields.get("decoupled"):
                    await self._stream(send, reply, request)
                else:
                    response = await self._host.infer_async(request)
                    _reply(send, {**reply, "final": True}, response)
        except TimeoutError:
            _reply_error(send, reply, "Request timeout expired", BLS_ERROR_CODE)
        except ServingError as exc:
            _reply_error(send, reply, bls_error_text(request.model_name, exc), BLS_ERROR_CODE)

    async def _stream(self, send: Send, reply: dict[str, Any], request: InferRequest) -> None:
        """A decoupled BLS call's responses, the last marked final, as Triton's iterator: a
        default model's one response ends it (no empty response after it); a decoupled model's
        flag-only end is the stub's empty final response."""
        async for response in self._host.stream_async(request):
            if response.flag_only:
                break
            if response.error is not None:  # sent without the final flag: more may follow
                exc = as_serving_error(response.error)
                _reply_error(send, reply, exc.message, BLS_ERROR_CODE, final=False)
                continue
            _reply(send, {**reply, "final": response.final}, response)
            if response.final:
                return
        _reply(send, {**reply, "final": True, "flag_only": True}, None)

    def call(self, send: Send, message: Message) -> None:
        """Answer a call: metrics, and readiness this server answers itself, at once; the
        model loading API in a thread (a load waits for the loop, which must stay free; so
        does readiness under `thaw up`, asked of the front door)."""
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
        if fn in _MODEL_CALLS and (fn != "is_model_ready" or host.asks_platform):
            loop = asyncio.get_running_loop()
            threading.Thread(
                target=self._model_call,
                args=(loop, send, reply, fn, args, _files(message)),
                daemon=True,
            ).start()
            return
        try:
            reply["value"] = handlers[fn](*args)
        except KeyError:
            reply["error"] = f"unknown call {fn!r}"
        except (ValueError, TypeError) as exc:
            reply["error"] = str(exc)
        with contextlib.suppress(ChannelClosed):
            send(Message(reply))

    def _model_call(
        self,
        loop: asyncio.AbstractEventLoop,
        send: Send,
        reply: dict[str, Any],
        fn: str,
        args: list[Any],
        files: dict[str, bytes] | None,
    ) -> None:
        try:
            if fn == "load_model":
                self._host.load_model(str(args[0]), str(args[1]), files)
                reply["value"] = None
            elif fn == "unload_model":
                self._host.unload_model(str(args[0]), bool(args[1]))
                reply["value"] = None
            else:
                reply["value"] = self._host.is_model_ready(str(args[0]), str(args[1]))
        except pb_utils.TritonModelException as exc:
            reply["error"] = exc.message()
        except (IndexError, KeyError, TypeError, ValueError) as exc:  # not what a stub sends
            reply["error"] = f"bad {fn} call from the stub: {exc!r}"[:500]
        with contextlib.suppress(RuntimeError):  # the loop closed: the server is stopping
            loop.call_soon_threadsafe(_send_quietly, send, Message(reply))


def _files(message: Message) -> dict[str, bytes] | None:
    """A load's override files, `{"file:1/model.onnx": bytes}`, from its tensors; None: none."""
    return {t.name: t.data.tobytes() for t in message.tensors} or None


def _send_quietly(send: Send, message: Message) -> None:
    with contextlib.suppress(ChannelClosed):
        send(message)


def _reply(send: Send, fields: dict[str, Any], response: InferResponse | None) -> None:
    tensors: list[Tensor] = []
    if response is not None and not response.flag_only:
        tensors = [Tensor(t.name, t.datatype, t.shape, t.data) for t in response.outputs]
        fields = {**fields, "response": {"params": dict(response.parameters), "n": len(tensors)}}
    elif response is not None:
        fields = {**fields, "response": None}
    _send_quietly(send, Message(fields, tensors))


def _reply_error(
    send: Send, reply: dict[str, Any], message: str, code: int, *, final: bool = True
) -> None:
    fields = {**reply, "final": final, "response": {"error": message, "code": code}}
    _send_quietly(send, Message(fields))
