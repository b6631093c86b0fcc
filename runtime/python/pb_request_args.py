"""`pb_utils.InferenceRequest`'s argument checks, made as Triton's binding makes them.

A wrong type (None included) is a TypeError, an empty input or output name a
TritonModelException, each in Triton's words. pb_utils imports `check_request_args` into its
own namespace and calls it on every request it builds (every request a stub hands its model,
every BLS request), so the common case is checked in exact types first. Like pb_utils, it is
imported by stub processes: the stdlib and pb_tensors only.
"""

from __future__ import annotations

import numbers

from runtime.python.pb_tensors import TritonModelException

__all__ = ["check_parameters", "check_request_args"]

_UINT32_MAX = (1 << 32) - 1
_UINT64_MAX = (1 << 64) - 1
_CAST_REFUSED = (
    "Unable to cast Python instance to C++ type (#define PYBIND11_DETAILED_ERROR_MESSAGES or "
    "compile in debug mode for details)"
)


def check_request_args(
    inputs, request_id, correlation_id, requested_output_names, model_name, model_version, flags,
    timeout,
):  # fmt: skip
    """InferenceRequest's argument checks as Triton's binding makes them: a wrong type (None
    included) is a TypeError, an empty input or output name a TritonModelException."""
    # The common case (every request a stub builds for its model, most BLS requests) in exact
    # types, checked without the ABC checks below (numbers.Integral costs ~0.3 µs a check).
    plain = (
        type(inputs) is list and type(request_id) is str and type(model_name) is str
        and type(requested_output_names) is list and type(model_version) is int
        and type(flags) is int and 0 <= flags <= _UINT32_MAX and type(timeout) is int
        and (type(correlation_id) is str or (type(correlation_id) is int
             and 0 <= correlation_id <= _UINT64_MAX))
    )  # fmt: skip
    if not plain:
        _check_types(
            inputs, request_id, correlation_id, requested_output_names, model_name,
            model_version, flags, timeout,
        )  # fmt: skip
    for name in requested_output_names:
        if type(name) is not str and not isinstance(name, str):
            raise TypeError("InferenceRequest(): requested_output_names must be a list of str")
    for tensor in inputs:
        if tensor is None:
            where = f"request with id '{request_id}' and model name '{model_name}'"
            raise TritonModelException(f"Input tensor for {where} should not be empty.")
    if "" in requested_output_names:
        where = f"request with id '{request_id}' and model name '{model_name}'"
        raise TritonModelException(f"Requested output name for {where} should not be empty.")


def _check_types(
    inputs, request_id, correlation_id, requested_output_names, model_name, model_version, flags,
    timeout,
):  # fmt: skip
    typed = (
        ("inputs", inputs, list | tuple), ("request_id", request_id, str),
        ("requested_output_names", requested_output_names, list | tuple),
        ("model_name", model_name, str), ("model_version", model_version, numbers.Integral),
        ("flags", flags, numbers.Integral), ("timeout", timeout, numbers.Integral),
    )  # fmt: skip
    for name, value, kind in typed:
        if not isinstance(value, kind):
            raise TypeError(f"InferenceRequest(): {name} has type {type(value).__name__}")
    if correlation_id is None:
        raise TypeError("InferenceRequest(): correlation_id must be an integer or a string")
    if not isinstance(correlation_id, int | str):
        raise TritonModelException("Correlation ID must be integer or string")
    # Triton's binding takes a uint64 correlation ID and uint32 flags: pybind11's words else.
    if isinstance(correlation_id, int) and not 0 <= correlation_id <= _UINT64_MAX:
        raise RuntimeError(_CAST_REFUSED)
    if not 0 <= flags <= _UINT32_MAX:
        raise RuntimeError(_CAST_REFUSED)


def check_parameters(parameters):
    """A model's `parameters` for a request it builds (BLS), checked as Triton's binding checks
    them: a dict of str keys and bool, int or str values (TritonModelException otherwise)."""
    if not isinstance(parameters, dict):
        return  # None (no parameters), or a JSON text a model passes as is
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(
                f"Expect parameters keys to have type str, found type {type(key)}"
            )
        if not isinstance(value, bool | int | str):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}"
            )
