"""Triton's ONNX auto-complete: a config's missing inputs, outputs and batching from the graph."""

from __future__ import annotations

from pathlib import Path

from tritonconfig.errors import ModelConfigError
from tritonconfig.schema import mc

__all__ = ["DEFAULT_MAX_BATCH_SIZE", "autocomplete_from_onnx", "onnx_ios"]

# Triton's `--backend-config=default-max-batch-size` default for auto-completed models.
DEFAULT_MAX_BATCH_SIZE = 4  # thawserver.backend_config_flags reads the flag

# ONNX TensorProto.DataType -> config DataType.
_ONNX_TO_CONFIG: dict[int, int] = {
    1: mc.TYPE_FP32,
    2: mc.TYPE_UINT8,
    3: mc.TYPE_INT8,
    4: mc.TYPE_UINT16,
    5: mc.TYPE_INT16,
    6: mc.TYPE_INT32,
    7: mc.TYPE_INT64,
    8: mc.TYPE_STRING,
    9: mc.TYPE_BOOL,
    10: mc.TYPE_FP16,
    11: mc.TYPE_FP64,
    12: mc.TYPE_UINT32,
    13: mc.TYPE_UINT64,
    16: mc.TYPE_BF16,
}

_Io = tuple[str, int, list[int]]  # name, config DataType, dims (-1 where variable)


def autocomplete_from_onnx(
    config: mc.ModelConfig,
    model_path: Path,
    source: str,
    *,
    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
) -> None:
    """Fill what the config leaves out from the graph, as Triton's onnxruntime backend does:
    nothing when it declares inputs (or batch inputs) and outputs; else the inputs and outputs,
    and for a graph that can batch (every tensor's first dimension variable) a config without
    `max_batch_size` gets `default_max_batch_size` (`--backend-config=default-max-batch-size`)
    and, when the batch is over 1 and it names no batcher, the dynamic batcher."""
    if len(config.input) + len(config.batch_input) > 0 and len(config.output) > 0:
        return
    inputs, outputs = onnx_ios(model_path, source)
    everything = inputs + outputs
    batchable = bool(everything) and all(dims and dims[0] == -1 for _, _, dims in everything)
    if batchable:
        if config.max_batch_size == 0:
            config.max_batch_size = max(default_max_batch_size, 0)
        if config.max_batch_size > 1 and not (
            config.HasField("sequence_batching") or config.HasField("dynamic_batching")
        ):
            config.dynamic_batching.SetInParent()
    elif config.max_batch_size != 0:
        raise ModelConfigError(
            f"{source}: autofill failed for model '{config.name}': model does not support "
            "batching while non-zero max_batch_size is specified"
        )
    strip = config.max_batch_size > 0
    if len(config.input) == 0:
        for name, dtype, dims in inputs:
            config.input.add(name=name, data_type=dtype, dims=dims[1:] if strip else dims)
    if len(config.output) == 0:
        for name, dtype, dims in outputs:
            config.output.add(name=name, data_type=dtype, dims=dims[1:] if strip else dims)


def onnx_ios(
    path: Path, source: str, *, overridable: list[_Io] | None = None
) -> tuple[list[_Io], list[_Io]]:
    """The graph's inputs (initializers left out) and outputs: (name, config DataType, dims,
    -1 where variable); ModelConfigError names a file that cannot be read. `overridable`: a
    list that also receives the initializers listed among the graph's inputs, which a request
    may override (onnxruntime's overridable initializers)."""
    import onnx  # lazily: only configs that need auto-completion pay for it

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError, OSError, ValueError...
        raise ModelConfigError(f"{source}: cannot read ONNX model {path.name}: {exc}") from exc
    graph = model.graph
    initializers = {init.name for init in graph.initializer}
    found: list[list[_Io]] = []
    inputs = [v for v in graph.input if v.name not in initializers]
    fed = [v for v in graph.input if v.name in initializers]
    for values in (inputs, list(graph.output), fed):
        ios = []
        for value in values:
            tensor = value.type.tensor_type
            if tensor.elem_type not in _ONNX_TO_CONFIG:
                raise ModelConfigError(
                    f"{source}: ONNX tensor '{value.name}' has unsupported element type "
                    f"{tensor.elem_type}"
                )
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
            ios.append((value.name, _ONNX_TO_CONFIG[tensor.elem_type], dims))
        found.append(ios)
    if overridable is not None:
        overridable.extend(found[2])
    return found[0], found[1]
