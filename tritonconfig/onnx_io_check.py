"""The config's inputs and outputs against the ONNX model's, refused in Triton's words.

    io_mismatch(config, inputs, outputs) -> the first thing Triton's onnxruntime backend
                                            refuses at load, or ""
    graph_mismatch(config, model_dir, versions, source)
                                         -> the same, read from each served version's graph
                                            (no session: what a front door checks at start)

`inputs` / `outputs` are the session's (name, shape) pairs, a symbolic or unknown dimension
as -1; `initializers` its overridable initializers, which a config may name as `optional`
inputs (the model's stored value when a request leaves them out): as in Triton's backend,
optional config inputs are not counted against the model's inputs. Triton's order: the
number of inputs, each config input and output known to the model, then each one's shape
(the batch dimension first when `max_batch_size` > 0). A sequence model's control and state
inputs count as Triton counts them. A model's scalar (0-dimensional, or of unknown rank,
which onnxruntime reports alike) takes config dims of one element (`[1]`, `[1, 1]`) on a
model without batching.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tritonconfig.errors import ModelConfigError
from tritonconfig.onnx_autocomplete import onnx_ios
from tritonconfig.platform import default_model_filename
from tritonconfig.schema import mc

__all__ = ["graph_mismatch", "io_mismatch", "is_scalar_dims"]

Shape = Sequence[int]


def io_mismatch(
    config: mc.ModelConfig,
    inputs: Sequence[tuple[str, Shape]],
    outputs: Sequence[tuple[str, Shape]],
    initializers: Sequence[tuple[str, Shape]] = (),
) -> str:
    """What Triton says is wrong with `config` for a session with these inputs and outputs."""
    name = config.name
    # A batch input's targets are the model's inputs the server makes, not the client.
    made = {target for entry in config.batch_input for target in entry.target_name}
    model_inputs = {key: shape for key, shape in inputs if key not in made}
    model_outputs = dict(outputs)
    required = sum(1 for io in config.input if not io.optional)
    expected = required + _sequence_inputs(config)
    if expected != len(model_inputs):
        return (
            f"unable to load model '{name}', configuration expects {expected} inputs, "
            f"model provides {len(model_inputs)}"
        )
    model_inputs.update((key, shape) for key, shape in initializers if key not in model_inputs)
    for field, declared, given in (
        ("input", config.input, model_inputs),
        ("output", config.output, model_outputs),
    ):
        for io in declared:
            if io.name not in given:
                allowed = ", ".join(given)
                return f"unexpected inference {field} '{io.name}', allowed {field}s are: {allowed}"
    # A batch output's shape is the batch's, not the model's (Triton skips it too).
    scattered = {target for entry in config.batch_output for target in entry.target_name}
    for declared, given in ((config.input, model_inputs), (config.output, model_outputs)):
        for io in declared:
            if getattr(io, "allow_ragged_batch", False) or io.name in scattered:
                continue
            dims = list(io.reshape.shape) if io.HasField("reshape") else list(io.dims)
            problem = _shape_problem(name, io.name, list(given[io.name]), dims, config)
            if problem:
                return problem
    return ""


def graph_mismatch(
    config: mc.ModelConfig, model_dir: Path, versions: Sequence[str], source: str
) -> str:
    """`io_mismatch` of `config` against each served version's ONNX graph (its file read
    whole, weights and all: blocking), or "". A file that cannot be read says so."""
    for version in versions:
        path = model_dir / str(version) / default_model_filename(config)
        overridable: list[tuple[str, int, list[int]]] = []
        try:
            inputs, outputs = onnx_ios(path, source, overridable=overridable)
        except ModelConfigError as exc:
            return exc.message
        problem = io_mismatch(
            config,
            [(name, dims) for name, _, dims in inputs],
            [(name, dims) for name, _, dims in outputs],
            [(name, dims) for name, _, dims in overridable],
        )
        if problem:
            return problem
    return ""


def _sequence_inputs(config: mc.ModelConfig) -> int:
    """The model inputs a sequence batcher fills, as Triton counts them: one per control kind
    the config names (start, end, ready, correlation id) and one per implicit state."""
    if not config.HasField("sequence_batching"):
        return 0
    batching = config.sequence_batching
    kinds = {control.kind for entry in batching.control_input for control in entry.control}
    return len(kinds) + len(batching.state)


def _shape_problem(
    model: str, tensor: str, shape: list[int], dims: list[int], config: mc.ModelConfig
) -> str:
    batching = config.max_batch_size > 0
    full = [-1, *dims] if batching else dims
    fits = len(shape) == len(full) and all(m in (-1, c) for m, c in zip(shape, full, strict=True))
    if fits or (not batching and not shape and is_scalar_dims(dims)):
        return ""
    how = (
        "an initial batch dimension because max_batch_size > 0 followed by the explicit tensor "
        "shape, making complete shape "
        if batching
        else "shape "
    )
    return (
        f"model '{model}', tensor '{tensor}': the model expects {len(shape)} dimensions (shape "
        f"{_text(shape)}) but the model configuration specifies {len(full)} dimensions "
        f"({how}{_text(full)})"
    )


def is_scalar_dims(dims: Sequence[int]) -> bool:
    """Config dims that a model's scalar (0-dimensional) tensor takes, as Triton's onnxruntime
    backend allows (L0_scalar_io): one element, every dimension 1 (`[1]`, `[1, 1]`)."""
    return bool(dims) and all(d == 1 for d in dims)


def _text(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"
