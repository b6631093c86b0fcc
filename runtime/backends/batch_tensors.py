"""One framework execution for a batch of requests: inputs concatenated, outputs split back.

The framework backends (onnxruntime, torch, TensorRT) run a dynamic batch as one call, as
Triton's do:

    merge(requests) -> one request: each input concatenated along the batch dimension (a
                       ragged input, `allow_ragged_batch`, flattened end to end instead), plus
                       the config's `batch_input` tensors that describe the batch
    run the merged request once
    split(response, requests) -> each output cut back along the batch dimension, by each
                       request's batch size (a `batch_output` BATCH_SCATTER_WITH_INPUT_SHAPE
                       target: its elements cut by each request's source input, in that
                       input's shape); each request keeps the outputs it asked for

The dispatcher only batches requests whose variable, non-ragged input shapes are equal
(runtime.models.signature.batch_key), so a concatenation always lines up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from runtime.errors import ServingError
from runtime.inference import InferRequest, InferResponse, InferTensor, RequestedOutput
from tritonconfig.schema import mc

__all__ = ["BatchLayout", "run_batched"]

RunOne = Callable[[InferRequest], InferResponse | ServingError]


@dataclass(frozen=True)
class _BatchInput:
    """A `batch_input`: a tensor the backend adds, derived from `source` across the batch."""

    kind: str
    target: str
    source: str
    dtype: type[np.generic]


@dataclass(frozen=True)
class BatchLayout:
    """How one model's requests combine into one execution (from its config, at load)."""

    model: str
    max_batch_size: int
    ragged: frozenset[str]
    batch_inputs: tuple[_BatchInput, ...]
    # BATCH_SCATTER_WITH_INPUT_SHAPE: output -> the input whose shape each request's piece takes
    scattered: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> BatchLayout:
        batch_inputs = tuple(
            _BatchInput(
                kind=mc.BatchInput.Kind.Name(b.kind),
                target=target,
                source=b.source_input[0] if len(b.source_input) else "",
                dtype=np.int32 if b.data_type == mc.TYPE_INT32 else np.float32,
            )
            for b in config.batch_input
            for target in b.target_name
        )
        return cls(
            model=config.name,
            max_batch_size=config.max_batch_size,
            ragged=frozenset(io.name for io in config.input if io.allow_ragged_batch),
            batch_inputs=batch_inputs,
            scattered=tuple(
                (target, b.source_input[0])
                for b in config.batch_output
                if b.kind == mc.BatchOutput.Kind.BATCH_SCATTER_WITH_INPUT_SHAPE
                and len(b.source_input)
                for target in b.target_name
            ),
        )

    def merges(self, requests: list[InferRequest]) -> bool:
        """Whether these requests run as one merged execution (always for a model with ragged
        or batch inputs, whose tensors only exist in that form)."""
        if self.max_batch_size <= 0:
            return False
        return len(requests) > 1 or bool(self.ragged) or bool(self.batch_inputs)

    def merge(self, requests: list[InferRequest]) -> InferRequest:
        """The one request that carries the whole batch."""
        first = requests[0]
        tensors: list[InferTensor] = []
        for index, tensor in enumerate(first.inputs):
            parts = [_input_at(r, tensor.name, index) for r in requests]
            if tensor.name in self.ragged:
                data = np.concatenate([p.data.reshape(-1) for p in parts])
            elif len(parts) == 1:
                data = tensor.data
            else:
                data = np.concatenate([p.data for p in parts], axis=0)
            tensors.append(InferTensor(tensor.name, tensor.datatype, tuple(data.shape), data))
        for batch_input in self.batch_inputs:
            tensors.append(self._batch_input(batch_input, requests))
        return InferRequest(
            model_name=first.model_name,
            model_version=first.model_version,
            inputs=tensors,
            requested_outputs=_union_of_outputs(requests),
            parameters=dict(first.parameters),
        )

    def split(
        self, response: InferResponse, requests: list[InferRequest]
    ) -> list[InferResponse | ServingError]:
        """The merged response cut back into one response per request."""
        sizes = [_batch_size(r) for r in requests]
        bounds = np.cumsum(sizes)[:-1]
        total = sum(sizes)
        per_request: list[list[InferTensor]] = [[] for _ in requests]
        scattered = dict(self.scattered)
        for tensor in response.outputs:
            if tensor.name in scattered:
                pieces_or_error = self._scatter(tensor, scattered[tensor.name], requests)
                if isinstance(pieces_or_error, ServingError):
                    return [pieces_or_error for _ in requests]
                for pieces, request_piece in zip(per_request, pieces_or_error, strict=True):
                    pieces.append(request_piece)
                continue
            if tensor.data.ndim == 0 or tensor.data.shape[0] != total:
                shape = list(tensor.data.shape)
                error = ServingError(
                    f"model '{self.model}' returned output '{tensor.name}' of shape {shape} for "
                    f"a batch of {total}: its first dimension must be the batch"
                )
                return [error for _ in requests]
            for pieces, piece in zip(per_request, np.split(tensor.data, bounds), strict=True):
                pieces.append(InferTensor(tensor.name, tensor.datatype, tuple(piece.shape), piece))
        results: list[InferResponse | ServingError] = []
        for request, outputs in zip(requests, per_request, strict=True):
            wanted = {o.name for o in request.requested_outputs}
            kept = [t for t in outputs if not wanted or t.name in wanted]
            results.append(
                InferResponse(response.model_name, response.model_version, kept, id=request.id)
            )
        return results

    def _scatter(
        self, tensor: InferTensor, source: str, requests: list[InferRequest]
    ) -> list[InferTensor] | ServingError:
        """A BATCH_SCATTER_WITH_INPUT_SHAPE output cut back into each request's piece: as many
        elements as its `source` input holds, in that input's shape (Triton's batch output)."""
        shapes = [tuple(_input_at(r, source, None).shape) for r in requests]
        counts = [int(np.prod(shape)) for shape in shapes]
        flat = tensor.data.reshape(-1)
        if flat.size != sum(counts):
            return ServingError(
                f"model '{self.model}' returned output '{tensor.name}' of {flat.size} elements "
                f"for inputs '{source}' of {sum(counts)}: it cannot be scattered in their shapes"
            )
        pieces = np.split(flat, np.cumsum(counts)[:-1])
        return [
            InferTensor(tensor.name, tensor.datatype, shape, piece.reshape(shape))
            for shape, piece in zip(shapes, pieces, strict=True)
        ]

    def _batch_input(self, spec: _BatchInput, requests: list[InferRequest]) -> InferTensor:
        sources = [_input_at(r, spec.source, None) for r in requests]
        counts = [s.data.size for s in sources]
        if spec.kind == "BATCH_ELEMENT_COUNT":
            data = np.asarray(counts, dtype=spec.dtype)
        elif spec.kind == "BATCH_ACCUMULATED_ELEMENT_COUNT":
            data = np.cumsum(counts).astype(spec.dtype)
        elif spec.kind == "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO":
            data = np.concatenate([[0], np.cumsum(counts)]).astype(spec.dtype)
        elif spec.kind == "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE":
            data = np.zeros(max(counts), dtype=spec.dtype)
        else:  # BATCH_ITEM_SHAPE(_FLATTEN): each batch item's shape past the batch dim
            items = [s.shape[1:] for s in sources for _ in range(s.shape[0])]
            data = np.asarray(items, dtype=spec.dtype).reshape(len(items), -1)
            if spec.kind == "BATCH_ITEM_SHAPE_FLATTEN":
                data = data.reshape(-1)
        datatype = "INT32" if spec.dtype is np.int32 else "FP32"
        return InferTensor(spec.target, datatype, tuple(data.shape), data)


def run_batched(
    layout: BatchLayout, requests: list[InferRequest], run_one: RunOne
) -> list[InferResponse | ServingError]:
    """Execute `requests` as one merged request through `run_one`, answers split back."""
    try:
        merged = layout.merge(requests)
    except (ValueError, KeyError) as exc:  # shapes that do not concatenate; a missing input
        error = ServingError(f"model '{layout.model}': cannot batch these requests: {exc}")
        return [error for _ in requests]
    result = run_one(merged)
    if isinstance(result, ServingError):
        return [result for _ in requests]
    return layout.split(result, requests)


def _input_at(request: InferRequest, name: str, index: int | None) -> InferTensor:
    """`request`'s input `name` (at `index` in the usual case that every request lists its
    inputs in the same order)."""
    inputs = request.inputs
    if index is not None and index < len(inputs) and inputs[index].name == name:
        return inputs[index]
    for tensor in inputs:
        if tensor.name == name:
            return tensor
    raise KeyError(f"a request in the batch has no input '{name}'")


def _batch_size(request: InferRequest) -> int:
    return int(request.inputs[0].shape[0]) if request.inputs and request.inputs[0].shape else 1


def _union_of_outputs(requests: list[InferRequest]) -> list[RequestedOutput]:
    """Every output some request asked for; none named (all) when any request wants all."""
    names: dict[str, None] = {}
    for request in requests:
        if not request.requested_outputs:
            return []
        names.update(dict.fromkeys(o.name for o in request.requested_outputs))
    return [RequestedOutput(name) for name in names]
