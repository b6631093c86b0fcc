"""A dynamic batch as one framework call: inputs concatenated (ragged ones flattened, Triton's
batch inputs added), outputs split back by each request's batch size."""

from __future__ import annotations

import numpy as np

from runtime.backends.batch_tensors import BatchLayout, run_batched
from runtime.errors import ServingError
from runtime.inference import InferRequest, InferResponse, InferTensor, RequestedOutput
from tritonconfig import parse_config


def _layout(text: str) -> BatchLayout:
    return BatchLayout.from_config(parse_config(f'name: "m" max_batch_size: 8 {text}', "test"))


def _request(rid: str, rows: np.ndarray, *, outputs: tuple[str, ...] = ()) -> InferRequest:
    tensor = InferTensor("X", "FP32", tuple(rows.shape), rows)
    wanted = [RequestedOutput(o) for o in outputs]
    return InferRequest("m", "1", [tensor], requested_outputs=wanted, id=rid)


class _Doubler:
    """A framework stand-in: one call per batch; Y = 2X, Z = X + 1."""

    def __init__(self) -> None:
        self.calls: list[InferRequest] = []

    def __call__(self, merged: InferRequest) -> InferResponse:
        self.calls.append(merged)
        x = merged.inputs[0].data
        outs = [("Y", 2 * x), ("Z", x + 1)]
        wanted = {o.name for o in merged.requested_outputs}
        tensors = [InferTensor(n, "FP32", a.shape, a) for n, a in outs if not wanted or n in wanted]
        return InferResponse("m", "1", tensors)


def test_requests_run_as_one_call_and_each_gets_its_own_rows() -> None:
    layout = _layout("")
    run = _Doubler()
    requests = [
        _request("a", np.array([[1.0, 2.0]], np.float32)),
        _request("b", np.array([[3.0, 4.0], [5.0, 6.0]], np.float32)),
    ]
    assert layout.merges(requests)
    results = run_batched(layout, requests, run)
    assert len(run.calls) == 1 and run.calls[0].inputs[0].shape == (3, 2)
    a, b = results
    assert isinstance(a, InferResponse) and isinstance(b, InferResponse)
    assert a.id == "a" and b.id == "b"
    np.testing.assert_array_equal(a.outputs[0].data, [[2.0, 4.0]])
    np.testing.assert_array_equal(b.outputs[0].data, [[6.0, 8.0], [10.0, 12.0]])


def test_each_request_keeps_only_the_outputs_it_asked_for() -> None:
    layout = _layout("")
    run = _Doubler()
    requests = [
        _request("y", np.ones((1, 2), np.float32), outputs=("Y",)),
        _request("z", np.ones((1, 2), np.float32), outputs=("Z",)),
        _request("all", np.ones((1, 2), np.float32)),
    ]
    results = run_batched(layout, requests, run)
    assert run.calls[0].requested_outputs == []  # someone wants all: compute all
    names = [[t.name for t in r.outputs] for r in results if isinstance(r, InferResponse)]
    assert names == [["Y"], ["Z"], ["Y", "Z"]]


def test_an_output_without_the_batch_dimension_fails_every_request_of_the_batch() -> None:
    layout = _layout("")

    def summed(merged: InferRequest) -> InferResponse:
        total = merged.inputs[0].data.sum(keepdims=True)[0]
        return InferResponse("m", "1", [InferTensor("Y", "FP32", total.shape, total)])

    requests = [_request(r, np.ones((1, 2), np.float32)) for r in "ab"]
    results = run_batched(layout, requests, summed)
    assert all(isinstance(r, ServingError) for r in results)
    assert "its first dimension must be the batch" in str(results[0])


def test_ragged_inputs_are_flattened_with_tritons_batch_inputs() -> None:
    layout = _layout(
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ] '
        'batch_input [ { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "INDEX" '
        'data_type: TYPE_FP32 source_input: "X" }, { kind: BATCH_ELEMENT_COUNT '
        'target_name: "COUNT" data_type: TYPE_INT32 source_input: "X" }, { kind: '
        'BATCH_MAX_ELEMENT_COUNT_AS_SHAPE target_name: "MAX" data_type: TYPE_INT32 '
        'source_input: "X" } ]'
    )
    requests = [_request(str(n), np.ones((1, n), np.float32)) for n in (3, 4, 5)]
    merged = layout.merge(requests)
    tensors = {t.name: t.data for t in merged.inputs}
    assert tensors["X"].shape == (12,)  # 3 + 4 + 5, end to end
    np.testing.assert_array_equal(tensors["INDEX"], [3, 7, 12])
    np.testing.assert_array_equal(tensors["COUNT"], [3, 4, 5])
    assert tensors["MAX"].shape == (5,)
    assert layout.merges(requests[:1])  # a ragged model's one request is merged too


def test_a_model_without_batching_never_merges() -> None:
    layout = BatchLayout.from_config(parse_config('name: "m" max_batch_size: 0', "test"))
    requests = [_request(r, np.ones((2,), np.float32)) for r in "ab"]
    assert not layout.merges(requests)


def test_a_scattered_batch_output_goes_back_in_each_requests_input_shape() -> None:
    # qa/L0_batch_input's ragged_io: an identity of a ragged input whose one flat output is
    # cut back by each request's input (BATCH_SCATTER_WITH_INPUT_SHAPE), as Triton does.
    layout = _layout(
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ] '
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ] '
        'batch_output [ { target_name: "Y" kind: BATCH_SCATTER_WITH_INPUT_SHAPE '
        'source_input: "X" } ]'
    )

    def identity(merged: InferRequest) -> InferResponse:
        x = merged.inputs[0].data
        return InferResponse("m", "1", [InferTensor("Y", "FP32", x.shape, x)])

    requests = [_request(str(n), np.full((1, n), n, np.float32)) for n in (2, 4, 1, 3)]
    results = run_batched(layout, requests, identity)
    for n, result in zip((2, 4, 1, 3), results, strict=True):
        assert isinstance(result, InferResponse)
        [y] = result.outputs
        assert y.shape == (1, n)
        np.testing.assert_array_equal(y.data, np.full((1, n), n, np.float32))
