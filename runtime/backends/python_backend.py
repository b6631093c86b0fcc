"""Run Triton python_backend `model.py` files unchanged: in the server process, or one stub
process per instance (runtime.python_placement decides, runtime.backends.python_stub_backend
runs the processes).

In-process, the model runs in its instance's worker thread (or on the event loop once proven
tiny: runtime.inline_policy), through the same runner a stub process uses
(runtime.pystub.model_runner), so both keep Triton's contract alike.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf import json_format

from runtime import triton_python_backend_utils as pb_utils
from runtime.backends.base import AsyncExecute, Backend, ExecTimings, LoadContext
from runtime.datatypes import config_to_v2, numpy_to_v2
from runtime.errors import (
    FeatureDisabled,
    InvalidInput,
    ModelNotFound,
    ModelUnavailable,
    RepositoryError,
    ServingError,
)
from runtime.inference import InferRequest, InferResponse, InferTensor
from runtime.model_config import config_to_json
from runtime.pystub.model_runner import (
    ModelError,
    ModelRunner,
    close_open_senders,
    import_model_file,
    install_pb_utils,
)
from runtime.python_placement import PythonRuntime, placement
from tritonconfig.schema import mc

__all__ = [
    "ERROR_CLASSES",
    "PythonBackend",
    "auto_complete_config",
    "execute_failure",
    "install_pb_utils",
    "model_args",
    "output_types",
    "pb_response_result",
]

logger = logging.getLogger(__name__)

ERROR_CLASSES: dict[int, type[ServingError]] = {
    pb_utils.TritonError.INVALID_ARG: InvalidInput,
    pb_utils.TritonError.NOT_FOUND: ModelNotFound,
    pb_utils.TritonError.UNAVAILABLE: ModelUnavailable,
    pb_utils.TritonError.UNSUPPORTED: FeatureDisabled,
}


def auto_complete_config(config: mc.ModelConfig, model_file: Path) -> mc.ModelConfig:
    """Call the model's optional `auto_complete_config` staticmethod and apply what it returns."""
    try:
        module = import_model_file(model_file)
    except ModelError as exc:
        raise RepositoryError(f"model '{config.name}': {exc.message}") from exc
    sys.modules.pop(module.__name__, None)  # only this call uses it
    hook = getattr(module.TritonPythonModel, "auto_complete_config", None)
    if hook is None:
        return config
    wrapper = pb_utils.ModelConfig(config_to_json(config))
    try:
        result = hook(wrapper)
    except BaseException as exc:
        raise RepositoryError(
            f"model '{config.name}': auto_complete_config raised {exc!r}"
        ) from exc
    updated = mc.ModelConfig()
    try:
        json_format.ParseDict(result.as_dict(), updated)
    except (json_format.ParseError, AttributeError, TypeError) as exc:
        raise RepositoryError(
            f"model '{config.name}': auto_complete_config returned an invalid config: {exc}"
        ) from exc
    return updated


def model_args(ctx: LoadContext) -> dict[str, str]:
    """The `args` dict Triton passes to `initialize` (every key and value a string)."""
    return {
        "model_config": json.dumps(config_to_json(ctx.config)),
        "model_instance_kind": "GPU" if ctx.instance_kind == "KIND_GPU" else "CPU",
        "model_instance_name": ctx.instance_name or f"{ctx.model_name}_0_0",
        "model_instance_device_id": str(ctx.device_id),
        "model_repository": str(ctx.model_dir),
        "model_version": ctx.version,
        "model_name": ctx.model_name,
    }


def output_types(config: mc.ModelConfig) -> dict[str, str]:
    """Each declared output's v2 datatype (BF16 outputs travel as uint16 arrays)."""
    return {o.name: config_to_v2(mc.DataType.Name(o.data_type)) for o in config.output}


def execute_failure(instance: str, message: str) -> ServingError:
    """Triton's text for a failed execute (observed on 2.51), less the traceback it appends."""
    return ServingError(
        f"Failed to process the request(s) for model '{instance}', message: {message}"
    )


def pb_response_result(
    model: str, version: str, request_id: str | None, response: Any, declared: dict[str, str]
) -> InferResponse | ServingError:
    """A pb_utils.InferenceResponse a model produced, as the server's response (or error)."""
    if not isinstance(response, pb_utils.InferenceResponse):
        return ServingError(f"model '{model}' returned {type(response).__name__}")
    if response.has_error():
        err = response.error()
        code = err.code() if hasattr(err, "code") else pb_utils.TritonError.INTERNAL
        cls = ERROR_CLASSES.get(code, ServingError)
        return cls(str(err.message() if hasattr(err, "message") else err))
    outputs = []
    for tensor in response.output_tensors():
        try:
            outputs.append(_output(tensor, declared))
        except (ServingError, AttributeError, TypeError, ValueError) as exc:
            return ServingError(f"model '{model}' returned a bad output: {exc}")
    params = response._parameters
    parameters = params if isinstance(params, dict) else json.loads(params) if params else {}
    return InferResponse(model, version, outputs, id=request_id, parameters=parameters)


def _output(tensor: pb_utils.Tensor, declared: dict[str, str]) -> InferTensor:
    array = tensor.as_numpy()
    if not isinstance(array, np.ndarray):
        array = np.asarray(array)
    name = tensor.name()
    if declared.get(name) == "BF16" and array.dtype == np.uint16:
        datatype = "BF16"
    else:
        datatype = numpy_to_v2(array.dtype)
    if datatype == "BYTES" and array.dtype != np.object_:
        array = array.astype(np.object_)
    return InferTensor(name, datatype, tuple(array.shape), array)


# Calls that wait on the server (BLS) or send from other threads: such a model's execute must
# never run on the event loop (a BLS call from there would wait on the loop it blocks).
_LOOP_UNSAFE = ("exec(", "get_response_sender", "load_model(", "unload_model(")


class InProcessPython:
    """One instance of a Triton python model, in this process."""

    used_image = False  # a python model has no snapshot image
    execute_async = None  # runs in this process: a worker thread (or the loop) runs `execute`

    def __init__(self) -> None:
        # Python code holds the GIL: a worker thread gives the loop nothing back, so a model
        # proven tiny may run inline (runtime.inline_policy), unless load() finds it unsafe.
        self.gil_bound = True
        self.timings = ExecTimings()
        self._runner: ModelRunner | None = None
        self._name = ""
        self._version = ""
        self._instance_name = ""
        self._decoupled = False
        self._declared: dict[str, str] = {}

    def load(self, ctx: LoadContext) -> None:
        label = f"model '{ctx.model_name}' version {ctx.version}"
        self._name, self._version = ctx.model_name, ctx.version
        self._instance_name = ctx.instance_name or f"{ctx.model_name}_0_0"
        self._declared = output_types(ctx.config)
        self._decoupled = ctx.config.model_transaction_policy.decoupled
        model_file = ctx.model_file or ctx.version_dir / "model.py"
        runner = ModelRunner(model_file, decoupled=self._decoupled)
        try:
            runner.initialize(model_args(ctx))
        except ModelError as exc:
            raise RepositoryError(f"{label}: {exc.message}") from exc
        self._runner = runner
        try:
            source = model_file.read_text(errors="replace")
        except OSError:
            source = _LOOP_UNSAFE[0]
        self.gil_bound = not self._decoupled and not any(c in source for c in _LOOP_UNSAFE)

    def execute(self, requests: list[InferRequest]) -> list[InferResponse | ServingError]:
        runner = self._runner
        if runner is None:
            raise ServingError(f"model '{self._name}' is not loaded")
        t0 = time.perf_counter_ns()
        sent: list[Any] = [None] * len(requests)
        pb_requests = [self._to_pb(request, index, sent) for index, request in enumerate(requests)]
        t1 = time.perf_counter_ns()
        try:
            responses = runner.execute(pb_requests)
        except ModelError as exc:
            t2 = time.perf_counter_ns()
            self.timings = ExecTimings(t1 - t0, t2 - t1, 0)
            logger.warning("model=%s execute failed: %s", self._name, exc.message)
            if self._decoupled:
                close_open_senders(pb_requests, exc.message)
            error = execute_failure(self._instance_name, exc.message)
            return [error for _ in requests]
        t2 = time.perf_counter_ns()
        if responses is None:  # decoupled: what it sends goes to each request's sink
            results: list[InferResponse | ServingError] = [
                InferResponse(self._name, self._version, [], id=r.id, flag_only=True)
                for r in requests
            ]
        else:
            results = [
                self._result(request, response if response is not None else sent[index])
                for index, (request, response) in enumerate(zip(requests, responses, strict=True))
            ]
        self.timings = ExecTimings(t1 - t0, t2 - t1, time.perf_counter_ns() - t2)
        return results

    def unload(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.finalize()

    def _result(self, request: InferRequest, response: Any) -> InferResponse | ServingError:
        if response is None:
            return ServingError(f"model '{self._name}' sent no response for a request")
        return pb_response_result(self._name, self._version, request.id, response, self._declared)

    def _to_pb(
        self, request: InferRequest, index: int, sent: list[Any]
    ) -> pb_utils.InferenceRequest:
        inputs = [pb_utils.Tensor(t.name, t.data) for t in request.inputs]
        pb = pb_utils.InferenceRequest(
            inputs=inputs,
            request_id=request.id or "",
            correlation_id=request.parameters.get("sequence_id", 0),
            requested_output_names=[o.name for o in request.requested_outputs],
            model_name=self._name,
            parameters=request.parameters,
        )
        pb._make_sender = functools.partial(self._sender, request, index, sent)
        return pb

    def _sender(
        self, request: InferRequest, index: int, sent: list[Any]
    ) -> pb_utils.InferenceResponseSender:
        sink = request.response_sink
        if self._decoupled and sink is not None:
            return pb_utils.InferenceResponseSender(
                lambda response, flags: self._deliver(request, response, flags),
                decoupled=True,
                cancelled=sink.cancelled,
            )

        def keep(response: Any, flags: int) -> None:
            if response is not None:
                sent[index] = response

        return pb_utils.InferenceResponseSender(keep, decoupled=False)

    def _deliver(self, request: InferRequest, response: Any, flags: int) -> None:
        """A decoupled send, from whichever model thread made it."""
        sink = request.response_sink
        if sink is None:
            return
        final = bool(flags & pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if response is None:
            sink.send(None, final=final)
            return
        sink.send(
            pb_response_result(self._name, self._version, request.id, response, self._declared),
            final=final,
        )


class PythonBackend:
    """A Python model instance, in this process or in a stub process (see the module doc)."""

    used_image = False

    def __init__(self) -> None:
        self._impl: Backend = InProcessPython()

    @property
    def gil_bound(self) -> bool:
        return self._impl.gil_bound

    @property
    def timings(self) -> ExecTimings:
        return self._impl.timings

    @property
    def execute_async(self) -> AsyncExecute | None:
        return self._impl.execute_async

    def load(self, ctx: LoadContext) -> None:
        if placement(ctx.config) == PythonRuntime.PROCESS:
            from runtime.backends.python_stub_backend import StubPython

            self._impl = StubPython()
        self._impl.load(ctx)

    def execute(self, requests: list[InferRequest]) -> list[InferResponse | ServingError]:
        return self._impl.execute(requests)

    def unload(self) -> None:
        self._impl.unload()
