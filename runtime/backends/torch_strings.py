"""BYTES tensors as TorchScript's `List[str]` and back, by the rules of Triton's libtorch backend.

torch has no tensor of strings, so Triton passes a BYTES (`TYPE_STRING`) input to a TorchScript
model as a `List[str]` and serializes a `List[str]` the model returns as a BYTES output:

    load     a TYPE_STRING input or state has one dimension in all, the batch dimension
             included (`reshape: { shape: [ ] }` lets a batched model take `[ 1 ]`), else
             "Triton only supports 1 dimensional List of String as input for 'X' ..." (Triton's
             check of a state reads no dims and so refuses none; a state is an input here too)
    input    the tensor's elements in order, each decoded as UTF-8 (Triton's C++ hands over raw
             `std::string`s; Python's `str` must be text, so other bytes are a 400 here)
    output   a `List[str]` -> a 1-D BYTES tensor, one element per string, UTF-8 encoded; a
             dynamic batch's list is cut back per request like any output (batch_tensors)
    errors   a list of anything but strings, or a value neither a tensor nor a list, is the
             model's error in Triton's words ("must be of type Tensor or List[str]"); so is a
             tensor for a TYPE_STRING output ("configuration expects datatype TYPE_BYTES ...")
"""

from __future__ import annotations

from typing import Any

import numpy as np

from runtime.errors import InvalidInput, RepositoryError
from runtime.inference import InferTensor
from tritonconfig.schema import mc
from tritonconfig.torch_datatypes import string_io_refusal

__all__ = ["check_string_io", "string_list", "string_output", "string_outputs"]


def check_string_io(config: mc.ModelConfig) -> None:
    """Refuse (at load) a TYPE_STRING input or state that cannot travel as one `List[str]`."""
    refused = string_io_refusal(config)
    if refused is not None:
        raise RepositoryError(refused)


def string_outputs(config: mc.ModelConfig) -> frozenset[str]:
    """The outputs (a state's output included) the config declares TYPE_STRING."""
    declared = {o.name for o in config.output if o.data_type == mc.TYPE_STRING}
    states = {
        s.output_name for s in config.sequence_batching.state if s.data_type == mc.TYPE_STRING
    }
    return frozenset(declared | states)


def string_list(tensor: InferTensor) -> list[str]:
    """A BYTES tensor's elements (C order) as the `List[str]` a TorchScript model takes."""
    strings: list[str] = []
    for index, item in enumerate(tensor.data.reshape(-1)):
        if isinstance(item, str):
            strings.append(item)
            continue
        try:
            strings.append(bytes(item).decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise InvalidInput(
                f"input '{tensor.name}' element {index} is not UTF-8 text ({exc.reason} at byte "
                f"{exc.start}): a TorchScript model takes BYTES as List[str]"
            ) from None
        except TypeError:  # an element the wire never makes (BYTES elements are bytes)
            raise InvalidInput(
                f"input '{tensor.name}' element {index} is {type(item).__name__}, not bytes"
            ) from None
    return strings


def _is_string_list(value: object) -> bool:
    """Whether `value` is what a TorchScript `List[str]` returns to Python: a list of str."""
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def string_output(name: str, value: Any) -> InferTensor:
    """The BYTES output `name` of a model's `List[str]`; TypeError, in Triton's words, for
    any other list."""
    if not _is_string_list(value):
        kinds = sorted({type(item).__name__ for item in value if not isinstance(item, str)})
        raise TypeError(
            f"output '{name}' must be of type Tensor or List[str], received a list of "
            f"{' and '.join(kinds)}"
        )
    array = np.empty(len(value), dtype=np.object_)
    array[:] = [item.encode("utf-8") for item in value]
    return InferTensor(name, "BYTES", (len(value),), array)
