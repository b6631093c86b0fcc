"""The `triton_python_backend_utils` module Triton python models import (server or stub process).

Everything a model calls that needs the server (BLS `exec`, custom metrics, logging, the model
loading API) goes through one `ModelHost` (runtime.python.host): in the server process the
server's own, in a stub process one that talks over the stub's control channel. Triton's own
module is a process-wide singleton too (its `Stub::GetOrCreateInstance`), and a model reaches it
only through module-level names, so the host is a module global here, set once per process by
`install_host`. This module imports nothing of Thaw but `runtime.python.host`, so a stub process
under another Python environment (`EXECUTION_ENV_PATH`) can import it with only numpy.
`MetricFamily` and `Metric` live in `pb_metrics`, `Logger` and `LogLevel` in `pb_logging`,
`ModelConfig` (auto-complete) in `pb_model_config`; all are re-exported here.
`InferenceRequest`'s argument checks are `pb_request_args`' (imported into this namespace: the
stub's hot path calls them directly).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import json
import logging
from collections.abc import Iterator
from typing import Any

from runtime.observe.custom_metrics import CustomMetrics
from runtime.python import pb_logging, pb_metrics
from runtime.python.host import InProcessHost, ModelHost
from runtime.python.pb_logging import Logger, LogLevel
from runtime.python.pb_metrics import Metric, MetricFamily
from runtime.python.pb_model_config import ModelConfig
from runtime.python.pb_request_args import check_parameters, check_request_args
from runtime.python.pb_tensors import (
    TRITON_STRING_TO_NUMPY,
    TRITONSERVER_MEMORY_CPU,
    TRITONSERVER_MEMORY_GPU,
    PreferredMemory,
    Tensor,
    TritonError,
    TritonModelException,
    deserialize_bytes_tensor,
    numpy_to_triton_type,
    serialize_byte_tensor,
    triton_string_to_numpy,
    triton_to_numpy_type,
)

__all__ = [
    "BLS_OUTSIDE_EXECUTE",
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY",
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "InferenceTrace",
    "LogLevel",
    "Logger",
    "Metric",
    "MetricFamily",
    "ModelConfig",
    "PreferredMemory",
    "ResponseIterator",
    "SharedMemory",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "bind_model_dir",
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_model_dir",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "install_host",
    "is_model_ready",
    "load_model",
    "numpy_to_triton_type",
    "outside_execute",
    "serialize_byte_tensor",
    "shared_memory",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "unload_model",
    "using_decoupled_model_transaction_policy",
]

_log = logging.getLogger("triton_python_backend_utils")

TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2


class LocalHost(InProcessHost):
    """The host before any server installed one (a model imported outside a server, tests):
    metrics are kept in this process, logs go to Python logging, BLS answers an error."""

    def __init__(self) -> None:
        self.metrics = CustomMetrics()

    def infer(self, request: Any) -> Any:
        return InferenceResponse(error=TritonError(_NO_SERVER))

    def stream(self, request: Any) -> Iterator[Any]:
        yield self.infer(request)

    def load_model(self, name: str, config: str, files: dict[str, bytes] | None) -> None:
        raise TritonModelException(_NO_SERVER)

    def unload_model(self, name: str, unload_dependents: bool) -> None:
        raise TritonModelException(_NO_SERVER)

    def is_model_ready(self, name: str, version: str) -> bool:
        return False


# InferenceResponse's default: no tensors (an explicit None is refused, as in Triton).
_NO_TENSORS: Any = object()
_NO_SERVER = "no server is running this model: BLS and the model loading API are unavailable"


_host: ModelHost = LocalHost()


def install_host(host):
    """Route this process's BLS calls, metrics and logs to `host`; returns the previous one."""
    global _host
    previous, _host = _host, host
    return previous


def current_host():
    """The host this process's models talk to."""
    return _host


# MetricFamily and Metric (pb_metrics), Logger (pb_logging) reach the host through it.
pb_metrics.bind_host(current_host)
pb_logging.bind_host(current_host)


class InferenceTrace:
    """A request's trace, as Triton's binding hands it to a model (`request.trace()`): given to
    a BLS request (`InferenceRequest(..., trace=request.trace())`), the call is traced as the
    request's child (its `parent_id`) when the request is traced. `get_context()` is the
    OpenTelemetry context, which the `triton` trace mode has none of."""

    __slots__ = ("_key",)

    def __init__(self, key=None):
        self._key = key  # the server's handle of the request's trace (None: not traced)

    def get_context(self):
        return None


_NO_TRACE = InferenceTrace()


class InferenceRequest:
    """A request as a python model sees it, or one it builds for BLS (`exec`, `async_exec`)."""

    def __init__(
        self,
        inputs=(),
        request_id="",
        correlation_id=0,
        requested_output_names=(),
        model_name="",
        model_version=-1,
        flags=0,
        timeout=0,
        preferred_memory=None,
        trace=None,
        parameters=None,
    ):
        # A model may pass the bytes it read from a BYTES tensor (Triton's binding takes both).
        model_name = model_name.decode() if isinstance(model_name, bytes) else model_name
        check_request_args(
            inputs, request_id, correlation_id, requested_output_names, model_name,
            model_version, flags, timeout,
        )  # fmt: skip
        if parameters:
            check_parameters(parameters)  # the server's own requests set `_parameters` instead
        self._inputs = list(inputs)
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._requested_output_names = list(requested_output_names)
        self._model_name = model_name
        self._model_version = model_version
        self._flags = flags
        self._timeout = timeout  # microseconds; 0: none
        self._preferred_memory = preferred_memory
        # Kept as given; serialized only if the model asks (most never do).
        self._parameters = parameters
        self._trace = trace if isinstance(trace, InferenceTrace) else _NO_TRACE
        self._sender = None
        # Set by the runner for requests handed to `execute`: makes the sender on first use
        # (most models never ask for one, and a request should cost them nothing).
        self._make_sender = None
        # Set by the runner too: asks the server whether the client went away (True is kept).
        self._cancel_probe = None
        self._cancel_seen = False
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL

    def inputs(self):
        return self._inputs

    def request_id(self):
        return self._request_id

    def correlation_id(self):
        return self._correlation_id

    def requested_output_names(self):
        """A set, as Triton's (pybind11's conversion of its std::set)."""
        return set(self._requested_output_names)

    def flags(self):
        return self._flags

    def set_flags(self, flags):
        self._flags = flags

    def timeout(self):
        return self._timeout

    def parameters(self):
        if not isinstance(self._parameters, str):
            self._parameters = json.dumps(
                self._parameters or {}, separators=(",", ":"), ensure_ascii=False
            )  # non-ASCII text as it came (Triton writes UTF-8, not \u escapes)
        return self._parameters

    def model_name(self):
        return self._model_name

    def model_version(self):
        return self._model_version

    def trace(self):
        return self._trace

    def is_cancelled(self):
        probe = self._cancel_probe
        if not self._cancel_seen and probe is not None:
            self._cancel_seen = bool(probe())
        return self._cancel_seen

    def set_release_flags(self, flags):
        self._release_flags = flags

    def get_response_sender(self):
        if self._sender is None and self._make_sender is not None:
            self._sender = self._make_sender()
        if self._sender is None:
            raise TritonModelException(
                "get_response_sender() is only available for requests passed to execute()"
            )
        return self._sender

    def exec(self, decoupled=False):
        """Run this request on another model and wait: a response (or, with `decoupled`, an
        iterator of them); failures come back as a response with an error. Raised, as in
        Triton: TritonModelException when called from `initialize` or `finalize`."""
        if _outside_execute.get():
            raise TritonModelException(BLS_OUTSIDE_EXECUTE)
        if decoupled:
            return ResponseIterator(_first_awaited(_host.stream(self)))
        return _host.infer(self)

    def async_exec(self, decoupled=False):
        """`exec` on the running event loop's default executor, as Triton does; await it."""
        if _outside_execute.get():
            raise TritonModelException(BLS_OUTSIDE_EXECUTE)
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(None, functools.partial(self.exec, decoupled))


_END = object()


def _first_awaited(responses):
    """`responses` with the request sent and its first response received now, on the caller's
    thread, as Triton's decoupled `exec` returns: `async_exec` then waits on its executor's
    thread, never on the event loop's (a BLS stream is only read when it is iterated)."""
    responses = iter(responses)
    first = next(responses, _END)
    return _after(first, responses)


def _after(first, responses):
    try:
        if first is not _END:
            yield first
            yield from responses
    finally:  # `ResponseIterator.cancel()` closes the stream before its end
        close = getattr(responses, "close", None)
        if close is not None:
            close()


class InferenceResponse:
    """The response for one request: output tensors, or an error."""

    __slots__ = ("_err", "_output_tensors", "_parameters")

    def __init__(self, output_tensors=_NO_TENSORS, error=None, parameters=None):
        if output_tensors is _NO_TENSORS:
            output_tensors = []
        elif output_tensors is None:  # Triton's binding converts no None to a list of tensors
            raise TypeError(
                "InferenceResponse(): output_tensors must be a list of Tensor, not None"
            )
        if not isinstance(output_tensors, list):
            raise TritonModelException('"output_tensors" must be a list.')
        for tensor in output_tensors:
            if not isinstance(tensor, Tensor):
                if tensor is None:
                    raise TritonModelException(
                        "Output tensor for inference response should not be empty."
                    )
                # Triton's binding refuses it here, not when the response is sent.
                raise TypeError(
                    "InferenceResponse(): output_tensors must be a list of Tensor, not a list "
                    f"holding {type(tensor).__name__}"
                )
        self._output_tensors = output_tensors
        self._err = error
        self._parameters = parameters

    def output_tensors(self):
        return self._output_tensors

    def has_error(self):
        return self._err is not None

    def error(self):
        return self._err

    def parameters(self):
        if not isinstance(self._parameters, str):
            self._parameters = json.dumps(
                self._parameters or {}, separators=(",", ":"), ensure_ascii=False
            )  # non-ASCII text as it came (Triton writes UTF-8, not \u escapes)
        return self._parameters


class InferenceResponseSender:
    """Sends a request's responses (decoupled models: any number, then the final flag).

    `deliver(response_or_None, flags)` is the runner's: it passes each send on to the server at
    once. After the final flag the sender is closed and further sends raise, as Triton's do; a
    non-decoupled model may send one response (Triton's texts and order of checks).
    `cancelled()` asks whether the client went away; once it has, the answer is kept (Triton's
    PbCancel asks its server each time until then).
    """

    def __init__(self, deliver, *, decoupled, cancelled=None, abandoned=None):
        self._deliver = deliver
        self._decoupled = decoupled
        self._cancelled = cancelled
        self._seen_cancelled = False
        self._closed = False
        self._sent = 0
        # Called if a non-decoupled sender is dropped without its response (the model let go
        # of the request): nothing else would ever answer it.
        self._abandoned = abandoned

    def __del__(self):
        abandoned = self._abandoned
        if abandoned is not None and self._sent == 0 and not self._closed:
            abandoned()

    def send(self, response=None, flags=0):
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException(
                f"Expected an 'InferenceResponse' object, found type '{type(response).__name__}'."
            )
        self._count(response, flags)
        self._deliver(response, flags)

    def _count(self, response, flags):
        """Triton's ResponseSender::UpdateStateAndCounters: refuse what the mode forbids."""
        final = bool(flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if not self._decoupled:
            if response is not None and self._sent > 0:
                raise TritonModelException(
                    "Unable to send response. Non-decoupled model cannot send more than one "
                    "response."
                )
            if final and response is None and self._sent == 0:
                raise TritonModelException(
                    "Unable to send response. Non-decoupled model cannot send complete final "
                    "before sending a response."
                )
        if self._closed:
            raise TritonModelException("Unable to send response. Response sender has been closed.")
        if final:
            self._closed = True
        self._sent += 1

    def _returned(self, response):
        """A non-decoupled `execute` returned `response` for this request: it counts as the
        final send (raises, as Triton's stub does, if the sender already answered)."""
        self._count(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def answered(self):
        """Whether something went out through this sender (non-decoupled: its response)."""
        return self._sent > 0

    def is_cancelled(self):
        if not self._seen_cancelled and self._cancelled is not None:
            self._seen_cancelled = bool(self._cancelled())
        return self._seen_cancelled

    def is_closed(self):
        return self._closed

    def close(self):
        self._closed = True


class ResponseIterator:
    """The responses of a decoupled BLS call, in order; the final flag ends the iteration."""

    def __init__(self, responses):
        self._responses = iter(responses)
        self._cancelled = False

    def __iter__(self):
        return self

    def __next__(self):
        if self._cancelled:
            raise StopIteration
        return next(self._responses)

    def cancel(self):
        self._cancelled = True
        close = getattr(self._responses, "close", None)
        if close is not None:
            close()


def get_input_tensor_by_name(inference_request, name):
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response, name):
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config, name):
    for props in model_config.get("input", []):
        if props["name"] == name:
            return props
    return None


def get_output_config_by_name(model_config, name):
    for props in model_config.get("output", []):
        if props["name"] == name:
            return props
    return None


def using_decoupled_model_transaction_policy(model_config):
    """Whether the model's config sets `model_transaction_policy { decoupled: true }`."""
    if "model_transaction_policy" in model_config:
        return bool(model_config["model_transaction_policy"].get("decoupled", False))
    return False


# The version directory of the model whose code runs (`<repository>/<model>/<version>`), which
# Triton's stub gives `get_model_dir()`: the directory of the model's file path, also for a
# python-based backend, whose model.py lives in the backend's directory. Set by the runner for
# the thread that calls initialize/execute/finalize; `_last_model_dir` answers the model's own
# threads (they do not inherit context), which is exact in a stub process (one model each).
_model_dir: contextvars.ContextVar[str] = contextvars.ContextVar("thaw_pb_model_dir")
_last_model_dir: list[str] = []


class bind_model_dir:  # a class named as the function it replaced: `with bind_model_dir(p):`
    """`get_model_dir()` answers `path` inside the block (the runner's calls into the model).

    A class rather than a generator: the runner enters it around every `execute`, and a
    generator-based context manager costs several times as much to enter and leave."""

    __slots__ = ("_path", "_token")

    def __init__(self, path):
        self._path = str(path)

    def __enter__(self):
        _last_model_dir[:] = [self._path]
        self._token = _model_dir.set(self._path)

    def __exit__(self, *exc_info):
        _model_dir.reset(self._token)


def get_model_dir():
    """The model's version directory, as Triton's `pb_utils.get_model_dir()`."""
    found = _model_dir.get(None)
    if found is not None:
        return found
    if _last_model_dir:
        return _last_model_dir[0]
    raise TritonModelException("get_model_dir(): no model has been initialized in this process")


# Triton's stub refuses BLS before its model's `initialize` returned and once `finalize` began
# (`Stub::IsInitialized`, `IsFinalizing`): the runner calls those two inside `outside_execute()`.
# A context variable, not a process flag: one server process runs many models (in_process).
BLS_OUTSIDE_EXECUTE = "BLS is only supported during the 'execute' function."
_outside_execute: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "thaw_pb_outside_execute", default=False
)


@contextlib.contextmanager
def outside_execute():
    """BLS `exec` / `async_exec` raise TritonModelException inside the block (the runner's
    `initialize` and `finalize` calls), as Triton's do there; the model loading API does not."""
    token = _outside_execute.set(True)
    try:
        yield
    finally:
        _outside_execute.reset(token)


def load_model(model_name, config="", files=None):
    """Triton's model loading API (explicit model control mode only)."""
    _host.load_model(model_name, config, files)


def unload_model(model_name, unload_dependents=False):
    _host.unload_model(model_name, unload_dependents)


def is_model_ready(model_name, model_version=""):
    return _host.is_model_ready(model_name, str(model_version))


class SharedMemory:
    """Triton's `c_python_backend_utils.shared_memory`: the stub's shared-memory pool. Thaw's
    stub keeps no pool (a large tensor crosses in its own memfd, released with its array), so
    the pool's free bytes never change: `free_memory()` is always `POOL_BYTES`."""

    POOL_BYTES = 1 << 20  # tritonserver's default `shm-default-byte-size`

    def free_memory(self):
        return self.POOL_BYTES


shared_memory = SharedMemory()
