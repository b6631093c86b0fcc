"""pb_utils' ModelHost inside a stub process: every call goes to the server over the channel.

BLS requests and calls (metrics, the model loading API) wait for their replies in the stub's
inbox (runtime.python.stub.inbox), by id; logs are sent and not waited for.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Iterator
from typing import Any

import numpy as np

from runtime.python import pb_utils
from runtime.python.stub.inbox import Inbox
from runtime.python.stub.protocol import pb_response, wire_tensors
from runtime.python.stub.wire import Channel, ChannelClosed, Message, Tensor

__all__ = ["StubHost"]

_GONE = "the server closed the stub's channel"


class StubHost:
    """The ModelHost of a stub process."""

    def __init__(self, channel: Channel, inbox: Inbox) -> None:
        self._channel = channel
        self._inbox = inbox
        self._ids = itertools.count(1)

    def _open(self, kind: str) -> tuple[str, int]:
        key = (kind, next(self._ids))
        self._inbox.open(key)
        return key

    # -- BLS ----------------------------------------------------------------------------------

    def _bls(self, request: Any, *, decoupled: bool) -> Iterator[Any]:
        key = self._open("bls")
        try:
            tensors = wire_tensors(request.inputs())
            fields = {
                "op": "bls",
                "bls": key[1],
                "decoupled": decoupled,
                "timeout_us": int(request.timeout() or 0),
                "request": {
                    "model": request.model_name(),
                    "version": request.model_version(),
                    "id": request.request_id(),
                    "params": json.loads(request.parameters()),
                    "outputs": list(request._requested_output_names),
                    "correlation_id": request.correlation_id(),
                    "flags": request.flags(),
                    "trace": request.trace()._key,
                },
            }
            try:
                self._channel.send(Message(fields, tensors))
            except ChannelClosed:
                yield _error(_GONE)
                return
            while True:
                reply = self._inbox.get(key)
                if reply is None:
                    yield _error(_GONE)
                    return
                yield pb_response(reply.fields.get("response"), reply.tensors)
                if reply.fields.get("final", True):
                    return
        finally:
            self._inbox.discard(key)

    def infer(self, request: Any) -> Any:
        return next(iter(self._bls(request, decoupled=False)))

    def stream(self, request: Any) -> Iterator[Any]:
        return self._bls(request, decoupled=True)

    # -- calls --------------------------------------------------------------------------------

    def _call(self, fn: str, *args: Any, tensors: list[Tensor] | None = None) -> Any:
        key = self._open("call")
        try:
            try:
                fields = {"op": "call", "call": key[1], "fn": fn, "args": list(args)}
                self._channel.send(Message(fields, tensors or []))
            except ChannelClosed:
                raise pb_utils.TritonModelException(_GONE) from None
            reply = self._inbox.get(key)
        finally:
            self._inbox.discard(key)
        if reply is None:
            raise pb_utils.TritonModelException(_GONE)
        if "error" in reply.fields:
            raise ValueError(reply.fields["error"])
        return reply.fields.get("value")

    def metric_family(self, name: str, description: str, kind: int) -> None:
        self._call("metric_family", name, description, kind)

    def metric_create(
        self, family: str, labels: dict[str, str], buckets: list[float] | None
    ) -> int:
        return int(self._call("metric_create", family, labels, buckets))

    def metric_update(self, key: int, op: str, value: float) -> None:
        self._call("metric_update", key, op, value)

    def metric_value(self, key: int) -> float:
        return float(self._call("metric_value", key))

    def is_cancelled(self, exec_id: int, index: int) -> bool:
        """Whether the client of request `index` of execute `exec_id` went away (asked of the
        server each time, as Triton's stub asks its backend: nothing is sent unless a model
        asks)."""
        return bool(self._call("is_cancelled", exec_id, index))

    def log(self, level: int, message: str, where: tuple[str, int] | None = None) -> None:
        fields: dict[str, Any] = {"op": "log", "level": level, "message": message}
        if where is not None:
            fields["file"], fields["line"] = where
        with contextlib.suppress(ChannelClosed):
            self._channel.send(Message(fields))

    def load_model(self, name: str, config: str, files: dict[str, bytes] | None) -> None:
        """The load goes to the server; `files` (`{"file:1/model.onnx": bytes}`) go with it
        as UINT8 tensors named by their keys."""
        tensors = [
            Tensor(path, "UINT8", (len(content),), np.frombuffer(content, dtype=np.uint8))
            for path, content in (files or {}).items()
        ]
        self._model_call("load_model", name, config, tensors=tensors)

    def unload_model(self, name: str, unload_dependents: bool) -> None:
        self._model_call("unload_model", name, unload_dependents)

    def is_model_ready(self, name: str, version: str) -> bool:
        return bool(self._model_call("is_model_ready", name, version))

    def _model_call(self, fn: str, *args: Any, tensors: list[Tensor] | None = None) -> Any:
        try:
            return self._call(fn, *args, tensors=tensors)
        except ValueError as exc:
            raise pb_utils.TritonModelException(str(exc)) from None


def _error(message: str) -> Any:
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message))
