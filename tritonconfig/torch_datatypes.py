"""Which config datatypes a TorchScript model may take and return, and Triton's libtorch
backend's words for one it may not (qa/L0_libtorch_io_types).

PyTorch has tensors of BOOL, UINT8, INT8, INT16, INT32, INT64, FP16, FP32 and FP64 in Triton's
libtorch backend (`ModelConfigDataTypeToTorchType`), and of BF16 here (`torch.bfloat16`: Thaw
takes it; Triton 2.51's backend does not); STRING inputs and outputs are lists of strings
(runtime.backends.torch_strings). The others (UINT16, UINT32, UINT64: PyTorch's unsigned
tensors beyond uint8 lack most operators) of an input, output or state refuse the load, as
does a sequence's CORRID control of any but those tensor types, in the order Triton checks
them: inputs, the CORRID control, states, outputs. A TYPE_STRING input or state must have one
dimension in all, the batch dimension included (`string_io_refusal`). Config alone: the
replica's TorchScript load (runtime.backends.torch_backend) and `thaw up`'s read of the
repository (activator.fleet) both judge it.
"""

from __future__ import annotations

from tritonconfig.schema import mc

__all__ = ["TORCH_DATATYPES", "string_io_refusal", "unsupported_datatype"]

TORCH_DATATYPES = frozenset(
    {"BOOL", "UINT8", "INT8", "INT16", "INT32", "INT64", "FP16", "BF16", "FP32", "FP64"}
)


def _name(data_type: int) -> str:
    return mc.DataType.Name(data_type)


def _tensor_type(data_type: int) -> bool:
    return _name(data_type).removeprefix("TYPE_") in TORCH_DATATYPES


def _io_type(data_type: int) -> bool:
    return _tensor_type(data_type) or _name(data_type) == "TYPE_STRING"


def unsupported_datatype(config: mc.ModelConfig, model: str) -> str | None:
    """Triton's text for the first datatype of `config` PyTorch cannot hold, else None."""
    for io in config.input:
        if not _io_type(io.data_type):
            return (
                f"unsupported datatype {_name(io.data_type)} for input '{io.name}' for model "
                f"'{model}'"
            )
    sequence = config.sequence_batching
    for control_input in sequence.control_input:
        for control in control_input.control:
            corrid = control.kind == mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_CORRID
            if corrid and not _tensor_type(control.data_type):
                return (
                    f"input '{control_input.name}' type '{_name(control.data_type)}' is not "
                    "supported by PyTorch."
                )
    for state in sequence.state:
        if not _io_type(state.data_type):
            return (
                f"unsupported datatype {_name(state.data_type)} for input state "
                f"'{state.input_name}' for model '{model}'"
            )
    for io in config.output:
        if not _io_type(io.data_type):
            return (
                f"unsupported datatype {_name(io.data_type)} for output '{io.name}' for model "
                f"'{model}'"
            )
    return None


def string_io_refusal(config: mc.ModelConfig) -> str | None:
    """Triton's text for a TYPE_STRING input or state that cannot travel as one `List[str]`
    (one dimension in all, the batch dimension included; runtime.backends.torch_strings), else
    None."""
    batch_dims = 1 if config.max_batch_size > 0 else 0
    for io in config.input:
        if io.data_type != mc.TYPE_STRING:
            continue
        dims = io.reshape.shape if io.HasField("reshape") else io.dims
        if len(dims) + batch_dims > 1:
            return _one_dimension(io.name, config.name)
    for state in config.sequence_batching.state:
        if state.data_type == mc.TYPE_STRING and len(state.dims) + batch_dims > 1:
            return _one_dimension(state.input_name, config.name)
    return None


def _one_dimension(name: str, model: str) -> str:
    return (
        f"Triton only supports 1 dimensional List of String as input for '{name}' for model "
        f"'{model}'"
    )
