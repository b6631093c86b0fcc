"""The server as Python models' `pb_utils` reaches it: BLS on the event loop, custom metrics, logs.

    model thread ── InferenceRequest.exec() ─▶ ServerHost.infer ─▶ run_coroutine_threadsafe
                                                   └▶ ServerHost.infer_async (loop) ─▶ local model
                                                                      └▶ not served here: front door
    stub reader (loop) ─▶ ServerHost.infer_async / stream_async (the same, for stub processes)

A BLS call to a model this server does not have goes to the front door when `thaw up` gave
one (runtime.direct.front_door): the activator holds it and wakes that model; a streaming call
(`exec(decoupled=True)`) goes to its gRPC front door, so a decoupled model's every response
comes back. Failures come back to
the model as responses with a TritonError, never raised, as Triton's do. Under `thaw up` the
model loading API (`load_model`, `unload_model`, `is_model_ready`) asks the front door too: a
model is loaded for the platform's clients, as Triton's server loads it for its own.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import queue
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any, Protocol

import numpy as np

from runtime.datatypes import numpy_to_v2
from runtime.direct.front_door import DECOUPLED_REFUSAL, FrontDoor
from runtime.errors import (
    DeadlineExceeded,
    FeatureDisabled,
    InvalidInput,
    ModelNotFound,
    ModelUnavailable,
    ServingError,
    is_refusal,
)
from runtime.inference import (
    InferRequest,
    InferResponse,
    InferTensor,
    RequestedOutput,
    RequestTrace,
)
from runtime.observe.custom_metrics import CustomMetrics
from runtime.observe.tracing import UNSAMPLED, RequestTracer
from runtime.python import pb_utils
from runtime.python.host import InProcessHost
from runtime.python.spare_stubs import SpareStubs

__all__ = [
    "BLS_ERROR_CODE",
    "BlsTarget",
    "PythonModelsHost",
    "ServerHost",
    "bls_trace",
    "current_server_host",
    "from_pb_request",
    "to_pb_response",
    "with_sequence",
]

logger = logging.getLogger(__name__)

# The code of every error a BLS call answers: Triton's python backend builds a BLS response's
# error from its message alone (request_executor.cc, PbError's default code), so a model's
# CANCELLED, an unknown model and a timeout all read INTERNAL to the caller (observed on 2.51).
BLS_ERROR_CODE = pb_utils.TritonError.INTERNAL
_END = object()


class BlsTarget(Protocol):
    """The part of the ModelManager BLS and the model loading API use."""

    async def infer(self, request: InferRequest) -> InferResponse: ...
    def stream(self, request: InferRequest) -> AsyncIterator[InferResponse]: ...
    def model_ready(self, name: str, version: str | None) -> bool: ...
    async def load(
        self, name: str, *, config_json: str | None = None, files: dict[str, bytes] | None = None
    ) -> float | None: ...
    async def unload(self, name: str, *, unload_dependents: bool = False) -> None: ...


def from_pb_request(pb: Any) -> InferRequest:
    """A BLS pb_utils.InferenceRequest as the server's request."""
    inputs = []
    for tensor in pb.inputs():
        data = tensor.as_numpy()
        datatype = numpy_to_v2(data.dtype)
        if datatype == "BYTES" and data.dtype != np.object_:
            data = data.astype(np.object_)
        inputs.append(InferTensor(tensor.name(), datatype, tuple(data.shape), data))
    version = pb.model_version()
    params = with_sequence(json.loads(pb.parameters()), pb.correlation_id(), pb.flags())
    parent = pb.trace()._key
    return InferRequest(
        model_name=pb.model_name(),
        model_version="" if version in (-1, None, "") else str(version),
        inputs=inputs,
        # a name asked for twice is one output, as Triton's request keeps a set of them
        requested_outputs=[RequestedOutput(n) for n in dict.fromkeys(pb._requested_output_names)],
        id=pb.request_id() or None,
        parameters=params,
        trace=bls_trace(parent, pb.model_name(), pb.request_id()),
    )


def bls_trace(parent: RequestTrace | None, model: str, request_id: str) -> RequestTrace:
    """A BLS call's trace: a child of the calling request's when the model passed it
    (`trace=request.trace()`) and it is traced, else none (UNSAMPLED), as Triton traces BLS."""
    return parent.child(model, request_id) if parent is not None else UNSAMPLED


def with_sequence(params: dict[str, Any], correlation_id: Any, flags: int) -> dict[str, Any]:
    """A BLS request's `params` with its sequence, as Triton's core reads a request's: its
    `correlation_id` (not 0 or "") the sequence id, its `flags`' SEQUENCE_START and
    SEQUENCE_END bits the sequence's start and end (the target's `flags()` shows them, a
    model without sequence batching's too)."""
    if correlation_id:
        params.setdefault("sequence_id", correlation_id)
    if flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
        params["sequence_start"] = True
    if flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END:
        params["sequence_end"] = True
    return params


# A BLS call to a decoupled model without `decoupled=True` (Triton 2.51's text, its "'" kept).
DECOUPLED_BLS = (
    "Model {model} is using the decoupled. The current BLS request call doesn't support models "
    "using the decoupled transaction policy. Please use 'decoupled=True' argument to the 'exec' "
    "or 'async_exec' calls for decoupled models.'"
)


def _not_ready(request: InferRequest) -> ModelUnavailable:
    """A BLS call to a model that is not there (or not ready), in Triton's words."""
    return ModelUnavailable(
        f"Failed for execute the inference request. Model '{request.model_name}' is not ready."
    )


def _unknown_model(exc: ServingError) -> bool:
    """Whether `exc` is the server's answer for a model (or version) it does not have."""
    return isinstance(exc, ModelNotFound) and exc.message.startswith("Request for unknown model")


def bls_error_text(model: str | None, exc: ServingError) -> str:
    """A BLS call's error as Triton's python backend words it: a refusal before the target ran
    (an unknown or unready model, bad inputs, a full queue) after "Model <m> - Error when
    running inference: " (an empty name too, as Triton writes "Model  - ..."); the target's own
    error (or a timeout) as it is."""
    if model is not None and is_refusal(exc):
        return f"Model {model} - Error when running inference: {exc.message}"
    return exc.message


def to_pb_response(result: InferResponse | Exception, model: str | None = None) -> Any:
    """The server's response (or error) as the pb_utils.InferenceResponse a model gets back;
    `model`: the call's target, named in a refusal's text (bls_error_text)."""
    if isinstance(result, Exception):
        if isinstance(result, ServingError):
            message = bls_error_text(model, result)
        else:
            message = repr(result)
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, BLS_ERROR_CODE))
    tensors = [pb_utils.Tensor(t.name, t.data) for t in result.outputs]
    return pb_utils.InferenceResponse(tensors, parameters=dict(result.parameters))


# How long `unload_model` waits for the server to refuse the unload (or finish it) before it
# returns with the unload under way, as Triton's does.
_UNLOAD_REFUSAL_S = 0.5


class ServerHost(InProcessHost):
    """pb_utils' ModelHost in the server process; create it on the server's event loop."""

    def __init__(
        self,
        target: BlsTarget,
        metrics: CustomMetrics,
        *,
        front_door: FrontDoor | None = None,
        tracer: RequestTracer | None = None,
        spares: SpareStubs | None = None,
    ) -> None:
        """`front_door`: where BLS calls to models this server does not serve go (`thaw up`);
        `tracer`: the server's, whose running traces a stub's BLS call names (`live_trace`);
        `spares`: stubs started ahead, which a stub's start takes first (`--python-spare-stubs`)."""
        self._tracer = tracer
        self.spares = spares
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._target = target
        self.metrics = metrics
        self._front_door = front_door
        # Unloads a model asked for and did not wait for (`unload_model`): kept until done.
        self._unloads: set[asyncio.Task[None]] = set()

    def live_trace(self, trace_id: object) -> RequestTrace | None:
        """The trace of a running request a stub's BLS call names (None: none, or not one)."""
        return self._tracer.live(trace_id) if self._tracer is not None else None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The server's event loop (stub processes are driven from it)."""
        return self._loop

    def in_loop_thread(self) -> bool:
        """Whether the caller runs on the server's event loop thread."""
        return threading.get_ident() == self._loop_thread

    def submit(self, coroutine: Any) -> Any:
        """Run `coroutine` on the server's loop from another thread (a concurrent Future)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    # -- BLS, on the loop (stub processes' requests come here directly) ----------------------

    def _routed_away(self, request: InferRequest) -> bool:
        if self._front_door is None or not request.model_name:
            return False  # no model has an empty name: refused here, in Triton's words
        try:
            return not self._target.model_ready(request.model_name, request.model_version or None)
        except ServingError:  # not even in this replica's repository view: ask the platform
            return True

    async def infer_async(self, request: InferRequest) -> InferResponse:
        """The one response of a default model; raises ServingError (a decoupled model is
        refused in Triton's words: a plain `exec()` is no stream)."""
        try:
            if self._routed_away(request):
                assert self._front_door is not None
                request.trace = None  # traced by the replica that serves it, on its own
                return await self._front_door.infer(request)  # its 501 for a decoupled model
            self._require_ready(request)
            return await self._target.infer(request)
        except ServingError as exc:
            if exc.status == FeatureDisabled.status and DECOUPLED_REFUSAL in exc.message:
                raise InvalidInput(DECOUPLED_BLS.format(model=request.model_name)) from None
            if _unknown_model(exc):  # the front door's 404 (thaw up): Triton's BLS words
                raise _not_ready(request) from None
            raise
        finally:
            if request.trace is not None:
                request.trace.end()

    async def stream_async(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        """Every response of the call (a decoupled model's stream); raises ServingError."""
        if self._routed_away(request):
            assert self._front_door is not None
            request.trace = None  # traced by the replica that serves it, on its own
            try:
                async for response in self._front_door.stream(request):
                    yield response
            except ModelNotFound as exc:
                if not _unknown_model(exc):
                    raise
                raise _not_ready(request) from None  # the front door's NOT_FOUND (thaw up)
            return
        self._require_ready(request)
        try:
            async for response in self._target.stream(request):
                yield response
        finally:
            if request.trace is not None:
                request.trace.end()

    def _require_ready(self, request: InferRequest) -> None:
        try:
            ready = self._target.model_ready(request.model_name, request.model_version or None)
        except ModelNotFound:
            ready = False
        if not ready:
            raise _not_ready(request)

    # -- ModelHost, from model threads --------------------------------------------------------

    def infer(self, pb_request: Any) -> Any:
        self._not_on_loop()
        try:
            request = from_pb_request(pb_request)
        except (ServingError, ValueError, TypeError) as exc:
            return to_pb_response(InvalidInput(f"BLS request is invalid: {exc}"))
        future = asyncio.run_coroutine_threadsafe(self.infer_async(request), self._loop)
        timeout_s = pb_request.timeout() / 1e6 if pb_request.timeout() else None
        try:
            return to_pb_response(future.result(timeout_s))
        except TimeoutError:
            future.cancel()
            return to_pb_response(DeadlineExceeded("Request timeout expired"))
        except ServingError as exc:
            return to_pb_response(exc, request.model_name)

    def stream(self, pb_request: Any) -> Iterator[Any]:
        self._not_on_loop()
        try:
            request = from_pb_request(pb_request)
        except (ServingError, ValueError, TypeError) as exc:
            yield to_pb_response(InvalidInput(f"BLS request is invalid: {exc}"))
            return
        items: queue.SimpleQueue[Any] = queue.SimpleQueue()

        async def pump() -> None:
            try:
                async for response in self.stream_async(request):
                    items.put(response)
            except ServingError as exc:
                items.put(exc)
            finally:
                items.put(_END)

        future = asyncio.run_coroutine_threadsafe(pump(), self._loop)
        timeout_s = pb_request.timeout() / 1e6 if pb_request.timeout() else None
        try:
            while True:
                try:
                    item = items.get(timeout=timeout_s)
                except queue.Empty:
                    yield to_pb_response(DeadlineExceeded("Request timeout expired"))
                    return
                if item is _END:
                    return
                if isinstance(item, InferResponse) and item.flag_only:
                    # Triton's iterator ends with the flag-only final as an empty response.
                    yield pb_utils.InferenceResponse()
                    continue
                if isinstance(item, InferResponse) and item.error is not None:
                    item = item.error  # sent without the final flag: the iterator goes on
                yield to_pb_response(item, request.model_name)
        finally:
            future.cancel()

    def _not_on_loop(self) -> None:
        if threading.get_ident() == self._loop_thread:
            raise pb_utils.TritonModelException(
                "BLS cannot be called from a model executing on the server's event loop"
            )

    # -- the model loading API: the platform's, through `thaw up`'s front door --------------

    def _control_door(self) -> FrontDoor | None:
        """Where the model loading API goes: the front door under `thaw up` (a replica serves
        its own models; a load is the platform's, as Triton's is its server's), else None."""
        return (
            self._front_door
            if self._front_door is not None and self._front_door.takes_bls
            else None
        )

    @property
    def asks_platform(self) -> bool:
        """Whether the model loading API asks the front door (and may wait on the loop for
        it), rather than this server, which answers `is_model_ready` at once."""
        return self._control_door() is not None

    def load_model(self, name: str, config: str, files: dict[str, bytes] | None) -> None:
        door = self._control_door()
        if door is not None:
            self._call(door.load(name, config or None, _files(files)))
            return
        self._call(self._target.load(name, config_json=config or None, files=_files(files)))

    def unload_model(self, name: str, unload_dependents: bool) -> None:
        """Triton's unload: starts it and returns, without waiting for the model to be gone
        (TRITONSERVER_ServerUnloadModel does not wait). A model may unload itself from its own
        `execute` (vllm_backend does, when its engine's health check fails): waiting for the
        unload would wait for that execute, which waits here. The server's refusal (not
        explicit mode, a bad name) is raised, as it comes before the unload waits for anything.
        Under `thaw up` the front door's unload returns once the model is refused (it waits
        for no drain: the call is marked sent back)."""
        door = self._control_door()
        if door is not None:
            self._call(door.unload(name, unload_dependents=unload_dependents))
            return
        self._call(self._start_unload(name, unload_dependents))

    async def _start_unload(self, name: str, unload_dependents: bool) -> None:
        task = asyncio.ensure_future(self._target.unload(name, unload_dependents=unload_dependents))
        self._unloads.add(task)
        task.add_done_callback(functools.partial(self._unload_done, name))
        # A refusal comes at once (before the unload waits for the model's requests): give it
        # _UNLOAD_REFUSAL_S to arrive and raise it; after that the unload is under way.
        await asyncio.wait({task}, timeout=_UNLOAD_REFUSAL_S)
        if task.done():
            task.result()

    def _unload_done(self, name: str, task: asyncio.Task[None]) -> None:
        self._unloads.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("model=%s unload asked by a model failed: %r", name, task.exception())

    def is_model_ready(self, name: str, version: str) -> bool:
        """Whether the server (under `thaw up`, the platform) serves `name` at `version`;
        False for a refusal. Not on the event loop under `thaw up` (it asks the front door)."""
        door = self._control_door()
        if door is not None:
            self._not_on_loop()
            ready = door.model_ready(name, version or None)
            try:
                return bool(asyncio.run_coroutine_threadsafe(ready, self._loop).result())
            except ServingError as exc:
                raise pb_utils.TritonModelException(exc.message) from None
        try:
            return self._target.model_ready(name, version or None)
        except ServingError:
            return False

    def _call(self, coroutine: Any) -> None:
        self._not_on_loop()
        try:
            asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()
        except ServingError as exc:
            raise pb_utils.TritonModelException(exc.message) from None


def _files(files: dict[str, bytes] | None) -> dict[str, bytes] | None:
    """pb_utils' `{"file:1/model.onnx": bytes}` as the load API's `{"1/model.onnx": bytes}`."""
    if not files:
        return None
    return {key.removeprefix("file:"): value for key, value in files.items()}


class PythonModelsHost:
    """The ServerHost of one ModelManager, installed as this process's pb_utils host while it
    runs (a process runs one server; the previous host comes back at `uninstall`)."""

    def __init__(self, host: ServerHost, previous: Any) -> None:
        self.host = host
        self._previous = previous

    @classmethod
    def install(
        cls,
        target: BlsTarget,
        metrics: CustomMetrics,
        front_door: FrontDoor | None = None,
        tracer: RequestTracer | None = None,
        spares: SpareStubs | None = None,
    ) -> PythonModelsHost:
        """Call on the server's event loop, before any Python model loads. `front_door`:
        where BLS calls to models this server does not serve go (its owner closes it)."""
        host = ServerHost(target, metrics, front_door=front_door, tracer=tracer, spares=spares)
        return cls(host, pb_utils.install_host(host))

    async def uninstall(self) -> None:
        if pb_utils.current_host() is self.host:
            pb_utils.install_host(self._previous)


def current_server_host() -> ServerHost:
    """The server's host, for stub processes' requests; ServingError outside a server."""
    host = pb_utils.current_host()
    if not isinstance(host, ServerHost):
        raise ServingError("Python stub processes need a running server (no ServerHost installed)")
    return host
