"""A loaded model's inputs/outputs: infer-request validation and reshape."""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from runtime.datatypes import config_to_v2, element_size, from_wire, string_count_refusal
from runtime.errors import InvalidInput
from runtime.inference import InferRequest, InferResponse, InferTensor
from tritonconfig.schema import mc

__all__ = ["IOSpec", "ModelSignature"]


@dataclass(frozen=True, slots=True)
class IOSpec:
    """One declared input or output: v2 datatype, dims without the batch dim, optional reshape."""

    name: str
    datatype: str
    dims: tuple[int, ...]
    reshape: tuple[int, ...] | None
    optional: bool
    ragged: bool = False  # `allow_ragged_batch`: batched whatever its shape


def _io_spec(io: Any) -> IOSpec:
    reshape = tuple(io.reshape.shape) if io.HasField("reshape") else None
    return IOSpec(
        name=io.name,
        datatype=config_to_v2(mc.DataType.Name(io.data_type)),
        dims=tuple(io.dims),
        reshape=reshape,
        optional=bool(getattr(io, "optional", False)),
        ragged=bool(getattr(io, "allow_ragged_batch", False)),
    )


# Triton's advice after a shape mismatch on a batching model (observed on 2.51).
_BATCH_NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to "
    "be prepended to each input shape. If you want to specify the full shape including the "
    "batch dim in your input dims config, try setting max_batch_size to zero. See the model "
    "configuration docs for more info on max_batch_size."
)


def _dims(shape: Iterable[int]) -> str:
    """A shape as Triton writes it in messages: `[-1,3]`."""
    return "[" + ",".join(str(d) for d in shape) + "]"


def carry_variable_dims(
    shape: tuple[int, ...], from_dims: tuple[int, ...], to_dims: tuple[int, ...]
) -> tuple[int, ...]:
    """`to_dims` with each -1 filled, in order, by the size `shape` has at `from_dims`' -1s:
    how Triton's core carries variable sizes across a `reshape` (an input's request dims into
    its reshape, an output's reshape into its dims: core `InferenceResponse::Output::Reshape`).
    A -1 left unfilled (a shape that does not follow `from_dims`) stays -1."""
    sizes = [
        size for size, dim in zip(shape, from_dims, strict=False) if dim == -1
    ] if len(shape) == len(from_dims) else []  # fmt: skip
    filled = []
    for dim in to_dims:
        filled.append(sizes.pop(0) if dim == -1 and sizes else dim)
    return tuple(filled)


def _matches(shape: tuple[int, ...], dims: tuple[int, ...]) -> bool:
    if shape == dims:  # the usual case: a fixed shape, sent as declared
        return True
    return len(shape) == len(dims) and all(
        d == -1 or d == s for s, d in zip(shape, dims, strict=True)
    )


@dataclass(frozen=True)
class ModelSignature:
    """What a model accepts and returns; built once per loaded version from its config."""

    model: str
    max_batch_size: int
    inputs: dict[str, IOSpec]
    outputs: dict[str, IOSpec]
    # Inputs whose shape must be equal in requests batched together: variable-size and not
    # ragged (Triton's `enforce_equal_shape_tensors`), and shape tensors.
    _equal_shape: frozenset[str] = field(default=frozenset(), repr=False)
    _optional: bool = field(default=False, repr=False)
    # Output name -> its classification labels (runtime.models.output_labels).
    labels: Mapping[str, tuple[str, ...]] = field(default_factory=dict, repr=False)

    @classmethod
    def from_config(
        cls, config: mc.ModelConfig, *, labels: Mapping[str, tuple[str, ...]] | None = None
    ) -> ModelSignature:
        """`labels`: the outputs' classification labels, read from the model's directory."""
        inputs = {io.name: _io_spec(io) for io in config.input}
        equal = {
            io.name
            for io in config.input
            if io.is_shape_tensor or (-1 in io.dims and not io.allow_ragged_batch)
        }
        return cls(
            model=config.name,
            max_batch_size=config.max_batch_size,
            inputs=inputs,
            outputs={io.name: _io_spec(io) for io in config.output},
            _equal_shape=frozenset(equal),
            _optional=any(spec.optional for spec in inputs.values()),
            labels=dict(labels or {}),
        )

    def batch_key(self, request: InferRequest) -> Hashable:
        """What two validated requests must share to run in one batch (None: anything goes):
        the shapes (past the batch dim) of their variable-size, non-ragged inputs, and, for a
        model with optional inputs, which inputs they carry."""
        if not self._equal_shape and not self._optional:
            return None
        skip = 1 if self.max_batch_size > 0 else 0
        shapes = tuple(
            sorted((t.name, t.shape[skip:]) for t in request.inputs if t.name in self._equal_shape)
        )
        if self._optional:
            return (shapes, frozenset(t.name for t in request.inputs))
        return shapes

    def validate(self, request: InferRequest) -> int:
        """Check a request against the config before anything runs; return its batch size.

        Inputs with a `reshape` are reshaped in place (a view, no copy); a raw binary request
        gets its one input deduced first.
        """
        if request.raw_input is not None:
            request.inputs = [self.raw_input(request.raw_input)]
            request.raw_input = None
        self._check_outputs(request)
        inputs = request.inputs
        self._check_count(request)
        seen: set[str] = set()
        batch: int | None = None
        # Last sent first: Triton checks them walking its request's input map, which iterates
        # newest first, so of two wrong inputs it names the last (observed on 2.51).
        for index in range(len(inputs) - 1, -1, -1):
            tensor = inputs[index]
            spec = self.inputs.get(tensor.name)
            if spec is None:
                raise InvalidInput(
                    f"unexpected inference input '{tensor.name}' for model '{self.model}'"
                )
            seen.add(tensor.name)
            size = self._check_tensor(spec, tensor)
            if batch is not None and size != batch:
                raise InvalidInput(  # Triton's text
                    f"input '{tensor.name}' batch size does not match other inputs for "
                    f"'{self.model}'"
                )
            batch = size
            if spec.reshape is not None or tensor.data.shape != tensor.shape:
                request.inputs[index] = self._shaped(spec, tensor, size)
        missing = [] if len(seen) == len(self.inputs) else self._missing(seen)
        if missing:
            raise InvalidInput(self._missing_text(request, missing))
        return batch if batch is not None else 1

    def _check_outputs(self, request: InferRequest) -> None:
        """The requested outputs, checked before any input as Triton does: a request naming an
        unknown output is refused for it even when an input is wrong too (observed on 2.51)."""
        if not self.outputs:
            return
        for out in request.requested_outputs:
            if out.name not in self.outputs:
                raise InvalidInput(
                    f"unexpected inference output '{out.name}' for model '{self.model}'"
                )
            if out.class_count:
                out.labels = self.labels.get(out.name, ())
                out.batched = self.max_batch_size > 0

    def raw_input(self, body: bytes) -> InferTensor:
        """The one input of a raw binary request: the whole body, as Triton deduces it.

        Only a model with exactly one input qualifies; its shape is the config's dims (after a
        batch dim of 1 on a batching model) with at most one -1, sized from the body. A BYTES
        input must have dims [1]: the body is its one element.
        """
        if len(self.inputs) != 1:
            raise InvalidInput(
                f"Raw request must only have 1 input (found 1) to be deduced but got "
                f"{len(self.inputs)} inputs in '{self.model}' model configuration"
            )
        spec = next(iter(self.inputs.values()))
        shape = [1] if self.max_batch_size > 0 else []
        variable: int | None = None
        fixed = 1  # elements in the fixed dims
        for dim in spec.dims:
            if dim == -1:
                if variable is not None:
                    raise InvalidInput(
                        f"The shape of the raw input '{spec.name}' can not be deduced because "
                        "there are more than one variable-sized dimension"
                    )
                variable = len(shape)
            else:
                fixed *= dim
            shape.append(dim)
        if spec.datatype == "BYTES":
            if variable is not None or fixed != 1:
                raise InvalidInput(
                    f"For BYTE datatype raw input '{spec.name}', the model must have input "
                    "shape [1]"
                )
            data = np.empty(1, dtype=np.object_)
            data[0] = body
            return InferTensor(spec.name, "BYTES", tuple(shape), data.reshape(shape))
        if variable is not None:
            row_bytes = fixed * element_size(spec.datatype)
            shape[variable] = len(body) // row_bytes if row_bytes else 0
        expected = math.prod(shape) * element_size(spec.datatype)
        if len(body) != expected:
            raise InvalidInput(
                f"input byte size mismatch for input '{spec.name}' for model '{self.model}'. "
                f"Expected {expected}, got {len(body)}"
            )
        data = from_wire(body, spec.name, spec.datatype, tuple(shape))
        return InferTensor(spec.name, spec.datatype, tuple(shape), data)

    def _check_count(self, request: InferRequest) -> None:
        """Triton's first checks of the inputs, before any one is looked at: a name given twice
        (refused as it is added: the first repeat in request order), then more inputs than
        the model has or fewer than it requires (core's ValidateRequestInputs: by count alone,
        so an unknown name among too many is named in that text, not as unexpected)."""
        names: set[str] = set()
        for tensor in request.inputs:
            if tensor.name in names:
                raise InvalidInput(f"input '{tensor.name}' already exists in request")
            names.add(tensor.name)
        given = len(request.inputs)
        if given > len(self.inputs) or given < self._required:
            raise InvalidInput(self._missing_text(request, self._missing(names)))

    @property
    def _required(self) -> int:
        if not self._optional:
            return len(self.inputs)
        return sum(not spec.optional for spec in self.inputs.values())

    def _missing(self, seen: set[str]) -> list[str]:
        return [s.name for s in self.inputs.values() if s.name not in seen and not s.optional]

    def _missing_text(self, request: InferRequest, missing: list[str]) -> str:
        """Triton's text (core's ValidateRequestInputs), without its "[request id: ...]"
        prefix: a range of input counts when the model has optional inputs. The inputs given
        are listed newest first, as its request's input map iterates (observed on 2.51 for up
        to three; past that its hash order), and nothing missing is its "]"."""
        got = ",".join(f"'{t.name}'" for t in reversed(request.inputs))
        need = "[" + ",".join(f"'{name}'" for name in missing) + "]" if missing else "]"
        required = self._required
        expected = (
            f"{len(self.inputs)} inputs"
            if required == len(self.inputs)
            else f"number of inputs between {required} and {len(self.inputs)}"
        )
        return (
            f"expected {expected} but got {len(request.inputs)} inputs for model "
            f"'{self.model}'. Got input(s) [{got}], but missing required input(s) {need}. "
            "Please provide all required input(s)."
        )

    def _check_tensor(self, spec: IOSpec, tensor: InferTensor) -> int:
        if tensor.datatype != spec.datatype:
            raise InvalidInput(
                f"inference input '{tensor.name}' data-type is '{tensor.datatype}', but model "
                f"'{self.model}' expects '{spec.datatype}'"
            )
        shape = tuple(tensor.shape)
        for d in shape:
            if not isinstance(d, int) or d < 0:
                raise InvalidInput(
                    f"input '{tensor.name}' has a negative dimension in {list(shape)}"
                )
        if self.max_batch_size > 0:
            if len(shape) == 0:
                raise InvalidInput(
                    f"input '{tensor.name}' has no shape but model requires batch dimension "
                    f"for '{self.model}'"
                )
            if shape[0] > self.max_batch_size:
                raise InvalidInput(
                    f"inference request batch-size must be <= {self.max_batch_size} for "
                    f"'{self.model}'"
                )
            batch, rest = shape[0], shape[1:]
        else:
            batch, rest = 1, shape
        if not _matches(rest, spec.dims):
            expected = ([-1] if self.max_batch_size > 0 else []) + list(spec.dims)
            raise InvalidInput(
                f"unexpected shape for input '{tensor.name}' for model '{self.model}'. "
                f"Expected {_dims(expected)}, got {_dims(shape)}. "
                + (_BATCH_NOTE if self.max_batch_size > 0 else "")
            )
        if batch == 0:
            raise self._batch_of_none(tensor, rest)
        count = math.prod(shape)
        if tensor.data.size != count:
            raise InvalidInput(
                f"input '{tensor.name}' holds {tensor.data.size} elements, shape "
                f"{list(shape)} needs {count}"
            )
        return batch

    def _batch_of_none(self, tensor: InferTensor, rest: tuple[int, ...]) -> InvalidInput:
        """Triton's refusal of a batch of 0 (`[0, ...]`): its core takes 0 for "no batch
        size", so it sizes the input by the dims after it and finds no data for them. (Dims
        after it that hold nothing either would reach the model as an empty batch there; a
        model is never run on no requests here.)"""
        expected = math.prod(rest)
        if expected == 0:
            return InvalidInput(
                f"input '{tensor.name}' has a batch of 0 for '{self.model}': a request must "
                "carry at least one"
            )
        if tensor.datatype == "BYTES":
            return string_count_refusal(expected, 0, tensor.name, self.model)
        return InvalidInput(
            f"input byte size mismatch for input '{tensor.name}' for model '{self.model}'. "
            f"Expected {expected * element_size(tensor.datatype)}, got 0"
        )

    def _shaped(self, spec: IOSpec, tensor: InferTensor, batch: int) -> InferTensor:
        shape = tuple(tensor.shape)
        if spec.reshape is not None:
            lead = 1 if self.max_batch_size > 0 else 0
            body = carry_variable_dims(shape[lead:], spec.dims, spec.reshape)
            shape = ((batch,) if lead else ()) + body
        try:
            data = tensor.data.reshape(shape)
        except ValueError as exc:
            raise InvalidInput(
                f"input '{tensor.name}' cannot be reshaped to {list(shape)} for model "
                f"'{self.model}'"
            ) from exc
        return InferTensor(tensor.name, tensor.datatype, shape, data, tensor.parameters)

    def finish(self, request: InferRequest, response: InferResponse, batch: int) -> InferResponse:
        """Keep the requested outputs, undoing any output `reshape`. None named means every
        output the config declares (Triton's core asks for those): a tensor a model adds
        beyond them is dropped, as Triton's backends drop it (a config without outputs keeps
        all)."""
        wanted = {o.name for o in request.requested_outputs} or self.outputs.keys()
        outputs = []
        for tensor in response.outputs:
            if wanted and tensor.name not in wanted:
                continue
            spec = self.outputs.get(tensor.name)
            if spec is not None and spec.reshape is not None:
                lead = 1 if self.max_batch_size > 0 else 0
                model_shape = tuple(tensor.shape)
                body = carry_variable_dims(model_shape[lead:], spec.reshape, spec.dims)
                shape = ((model_shape[0] if model_shape else batch,) if lead else ()) + body
                if -1 not in shape and math.prod(shape) == tensor.data.size:
                    tensor = InferTensor(
                        tensor.name, tensor.datatype, shape, tensor.data.reshape(shape)
                    )
            outputs.append(tensor)
        response.outputs = outputs
        if response.id is None:
            response.id = request.id
        return response
