"""A Python model's I/O as both ways of running it see it: Triton's error classes, the `args`
of `initialize`, the declared output types, a `pb_utils.InferenceResponse` as the server's, a
request's sequence flags and the parameters its model sees, whether a request was cancelled,
and a request the model released with RESCHEDULE.

runtime.python.backend (in the server process) and runtime.python.stub_backend (a stub
process per instance) both import it, so neither imports the other for these.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from runtime.backends.base import LoadContext
from runtime.datatypes import config_to_v2, numpy_to_v2
from runtime.errors import (
    FeatureDisabled,
    InvalidInput,
    ModelErrorAlreadyExists,
    ModelErrorCancelled,
    ModelErrorUnknown,
    ModelNotFound,
    ModelUnavailable,
    ServingError,
)
from runtime.inference import REQUEST_FIELDS, InferRequest, InferResponse, InferTensor
from runtime.model_config import config_to_json
from runtime.python import pb_utils
from runtime.python.stub.model_runner import execute_failure_text
from tritonconfig.schema import mc

__all__ = [
    "ERROR_CLASSES",
    "RESCHEDULE_REFUSED",
    "complete_early",
    "execute_failure",
    "model_args",
    "model_parameters",
    "output_types",
    "pb_response_result",
    "request_cancelled",
    "request_flags",
    "rescheduled",
]

# Triton's text (core's InferenceRequest::Release) for RESCHEDULE from a model whose scheduler
# cannot run a request again: only `sequence_batching { iterative_sequence: true }` can.
RESCHEDULE_REFUSED = (
    "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not "
    "configured to handle such a flag."
)

ERROR_CLASSES: dict[int, type[ServingError]] = {
    pb_utils.TritonError.INVALID_ARG: InvalidInput,
    pb_utils.TritonError.NOT_FOUND: ModelNotFound,
    pb_utils.TritonError.UNAVAILABLE: ModelUnavailable,
    pb_utils.TritonError.UNSUPPORTED: FeatureDisabled,
    pb_utils.TritonError.UNKNOWN: ModelErrorUnknown,
    pb_utils.TritonError.ALREADY_EXISTS: ModelErrorAlreadyExists,
    pb_utils.TritonError.CANCELLED: ModelErrorCancelled,
}


def request_cancelled(request: InferRequest) -> bool:
    """Whether the client went away from `request` (`is_cancelled()` of its pb_utils request
    and response sender): its call was cancelled, or a decoupled request's reader is gone."""
    completion = request.completion
    if completion is not None and completion.cancelled():
        return True
    sink = request.response_sink
    return sink is not None and sink.cancelled()


def model_parameters(request: InferRequest) -> dict[str, Any]:
    """The parameters `parameters()` of `request`'s pb_utils request shows its model: all but
    Triton's request fields (REQUEST_FIELDS)."""
    params = request.parameters
    if REQUEST_FIELDS.isdisjoint(params):
        return params
    return {k: v for k, v in params.items() if k not in REQUEST_FIELDS}


def request_flags(request: InferRequest) -> int:
    """Triton's request flags of a sequence request, as `flags()` of its pb_utils request:
    SEQUENCE_START and SEQUENCE_END from its `sequence_start` / `sequence_end` parameters."""
    params = request.parameters
    start = pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START if params.get("sequence_start") else 0
    end = pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END if params.get("sequence_end") else 0
    return start | end


def rescheduled(
    model: str, version: str, request: InferRequest, *, iterative: bool
) -> InferResponse | ServingError:
    """The result of a request its model released with RESCHEDULE: marked to run again for an
    iterative sequence model; Triton's error for any other (Thaw answers it: Triton would
    release the request with no response, and its client would wait)."""
    if not iterative:
        return ServingError(RESCHEDULE_REFUSED)
    return InferResponse(model, version, [], id=request.id, rescheduled=True)


def complete_early(request: InferRequest, result: InferResponse | ServingError) -> None:
    """Give `request`'s client `result` now, before the execute returns (a non-decoupled
    model's sender answering at once, as Triton sends it). Call on the event loop."""
    completion = request.completion
    if completion is None or completion.done():
        return
    if isinstance(result, ServingError):
        completion.set_exception(result)
    else:
        completion.set_result(result)


def model_args(ctx: LoadContext) -> dict[str, str]:
    """The `args` dict Triton passes to `initialize` (every key and value a string)."""
    return {
        "model_config": json.dumps(config_to_json(ctx.config)),
        # KIND_CPU / KIND_GPU / a python KIND_MODEL: CPU / GPU / MODEL, as Triton's args
        "model_instance_kind": ctx.instance_kind.removeprefix("KIND_"),
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
    return ServingError(execute_failure_text(instance, message))


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
        return cls(str(err.message() if hasattr(err, "message") else err), from_model=True)
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
