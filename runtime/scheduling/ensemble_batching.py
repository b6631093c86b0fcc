"""Where an ensemble passes a tensor between a batching and a non-batching model: its shape, as
Triton's core gives it (`EnsembleContext::ReshapeTensorDims`).

    tensor from a non-batching side ─▶ batching model: its shape is the model's dims
                                       (variable sizes as wildcards)? prepend a batch of 1
    tensor of batch 1 ─▶ non-batching model: its shape is not the model's dims? drop the batch
    anything else ─▶ unchanged (two batching or two non-batching sides: nothing to convert)

A tensor's side is its producer's: an ensemble input is the ensemble's (batching when its
`max_batch_size` > 0), a step's output is that step model's. The ensemble's own outputs are
converted the same way against the ensemble's output shapes (their `reshape` when they have
one: the shape inside the ensemble). qa/L0_infer_reshape's non-batching ensembles step through
batching `nop_*` models this way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tritonconfig import EnsembleStep
from tritonconfig.schema import mc

__all__ = ["ConfigOf", "TensorSides", "converted_shape"]

# A model's config by name, as loaded here or as the repository holds it (None: not known).
ConfigOf = Callable[[str], "mc.ModelConfig | None"]


def _matches(dims: Sequence[int], shape: Sequence[int]) -> bool:
    return len(dims) == len(shape) and all(
        d == -1 or d == s for d, s in zip(dims, shape, strict=True)
    )


def converted_shape(
    dims: Sequence[int], *, model_batches: bool, tensor_batches: bool, shape: Sequence[int]
) -> tuple[int, ...]:
    """`shape` as a model whose config says `dims` (and batches or not) takes a tensor from a
    side that batches or not (module docstring)."""
    if model_batches and not tensor_batches and _matches(dims, shape):
        return (1, *shape)
    batch_of_one = len(shape) > 0 and shape[0] == 1
    if not model_batches and tensor_batches and batch_of_one and not _matches(dims, shape):
        return tuple(shape[1:])
    return tuple(shape)


class TensorSides:
    """Whether each ensemble tensor comes from a batching side (module docstring)."""

    def __init__(self, config: mc.ModelConfig, steps: Sequence[EnsembleStep], config_of: ConfigOf):
        self._batching = config.max_batch_size > 0
        self._producer = {tensor: step.model_name for step in steps for tensor in step.writes}
        self._config_of = config_of
        self._outputs = {
            io.name: tuple(io.reshape.shape) if io.HasField("reshape") else tuple(io.dims)
            for io in config.output
        }

    def batches(self, tensor: str) -> bool | None:
        """Whether `tensor`'s producer batches; None when its config is not known here."""
        producer = self._producer.get(tensor)
        if producer is None:
            return self._batching
        config = self._config_of(producer)
        return None if config is None else config.max_batch_size > 0

    def step_input(self, step_model: str, model_input: str, tensor: str,
                   shape: Sequence[int]) -> tuple[int, ...]:  # fmt: skip
        """The shape `tensor` goes to `step_model`'s input `model_input` in."""
        config = self._config_of(step_model)
        tensor_batches = self.batches(tensor)
        if config is None or tensor_batches is None:
            return tuple(shape)
        dims = next((tuple(io.dims) for io in config.input if io.name == model_input), None)
        if dims is None:
            return tuple(shape)
        return converted_shape(
            dims, model_batches=config.max_batch_size > 0, tensor_batches=tensor_batches,
            shape=shape,
        )  # fmt: skip

    def ensemble_output(self, name: str, shape: Sequence[int]) -> tuple[int, ...]:
        """The shape the ensemble answers its output `name` (from its producer) in."""
        tensor_batches = self.batches(name)
        dims = self._outputs.get(name)
        if tensor_batches is None or dims is None:
            return tuple(shape)
        return converted_shape(
            dims, model_batches=self._batching, tensor_batches=tensor_batches, shape=shape
        )
