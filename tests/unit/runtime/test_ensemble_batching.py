"""An ensemble passes a tensor between a batching and a non-batching model as Triton's core
does (qa/L0_infer_reshape's non-batching ensembles step through batching `nop_*` models)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import pytest

from runtime.inference import InferRequest, InferResponse, InferTensor
from runtime.observe.stats import ModelStats
from runtime.scheduling.ensemble_batching import converted_shape
from runtime.scheduling.ensemble_scheduler import EnsembleScheduler
from runtime.scheduling.request_parameters import SchedulingParameters
from tritonconfig import parse_config


@pytest.mark.parametrize(
    ("dims", "model_batches", "tensor_batches", "shape", "expected"),
    [
        ([16], True, False, [16], (1, 16)),  # a batch of one is prepended
        ([-1, 2], True, False, [3, 2], (1, 3, 2)),  # variable sizes match as wildcards
        ([16], True, False, [2, 16], (2, 16)),  # already batched: as it is
        ([1, 2], False, True, [1, 2], (1, 2)),  # already the model's dims: as it is
        ([2], False, True, [1, 2], (2,)),  # a batch of one is dropped
        ([2], False, True, [3, 2], (3, 2)),  # a larger batch cannot be: the model refuses it
        ([2], True, True, [1, 2], (1, 2)),  # both batch: nothing to convert
        ([2], False, False, [2], (2,)),
    ],
)
def test_a_tensor_crosses_between_batching_and_non_batching_sides(
    dims: list[int], model_batches: bool, tensor_batches: bool, shape: list[int],
    expected: tuple[int, ...],
) -> None:  # fmt: skip
    got = converted_shape(
        dims, model_batches=model_batches, tensor_batches=tensor_batches, shape=shape
    )
    assert got == expected


ENSEMBLE = """
name: "e" platform: "ensemble" max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 16 ] } ]
ensemble_scheduling { step [
  { model_name: "nop" model_version: -1 input_map { key: "INPUT0" value: "IN" }
    output_map { key: "OUTPUT0" value: "OUT" } }
] }
"""
NOP = """
name: "nop" backend: "python" max_batch_size: 1024
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""


class _BatchingNop:
    """A batching identity that refuses a tensor without its batch dimension, as the step
    model's validation would."""

    def __init__(self) -> None:
        self.shapes: list[tuple[int, ...]] = []

    async def infer(self, request: InferRequest) -> InferResponse:
        [tensor] = request.inputs
        self.shapes.append(tuple(tensor.shape))
        assert tensor.data.shape == tuple(tensor.shape)
        return InferResponse(
            "nop", "1", [InferTensor("OUTPUT0", "FP32", tensor.shape, tensor.data)]
        )

    async def stream(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        yield await self.infer(request)


async def test_a_non_batching_ensemble_steps_through_a_batching_model() -> None:
    configs = {"nop": parse_config(NOP, "nop")}
    runner = _BatchingNop()
    scheduler = EnsembleScheduler(
        "e", "1", parse_config(ENSEMBLE, "e"), runner, ModelStats(),
        config_of=configs.get,
    )  # fmt: skip
    data = np.arange(16, dtype=np.float32)
    request = InferRequest("e", "", [InferTensor("IN", "FP32", (16,), data)])
    response = await scheduler.submit(
        request, batch_size=1, received_ns=0, params=SchedulingParameters()
    )
    assert runner.shapes == [(1, 16)]  # the step got its batch dimension
    [out] = response.outputs
    assert out.shape == (16,) and out.data.shape == (16,)  # the ensemble's answer has none
    np.testing.assert_array_equal(out.data, data)


async def test_without_the_step_configs_tensors_go_on_as_they_are() -> None:
    runner = _BatchingNop()
    scheduler = EnsembleScheduler("e", "1", parse_config(ENSEMBLE, "e"), runner, ModelStats())
    data = np.arange(16, dtype=np.float32)
    request = InferRequest("e", "", [InferTensor("IN", "FP32", (16,), data)])
    await scheduler.submit(request, batch_size=1, received_ns=0, params=SchedulingParameters())
    assert runner.shapes == [(16,)]
