"""SequenceStates: a sequence's implicit state in and out of one execution, with a running-sum
"model" standing in for the backend (OUTPUT_STATE = INPUT_STATE + INPUT)."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format

from runtime.errors import RepositoryError, ServingError
from runtime.inference import InferRequest, InferResponse, InferTensor, RequestedOutput
from runtime.scheduling.batch_execution import Outcome, QueuedRequest
from runtime.scheduling.sequence_state import SequenceStates
from tritonconfig.schema import mc

_CONFIG = """
name: "sum"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32
            dims: [ 1 ] } ]
}
"""


def _config(text: str = _CONFIG) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())


def _item(value: int, sequence: int, *, filler: bool = False, **flags: bool) -> QueuedRequest:
    data = np.array([[value]], np.int32)
    request = InferRequest(
        "sum", "1", [InferTensor("INPUT", "INT32", (1, 1), data)],
        parameters={"sequence_id": sequence, **flags},
    )  # fmt: skip
    return QueuedRequest(request, None, 1, 0, 0, sequence=sequence, filler=filler)


def _execute(batch: list[QueuedRequest]) -> list[Outcome]:
    """The backend: each request's sum, every output it asks for."""
    done: list[Outcome] = []
    for item in batch:
        inputs = {t.name: t.data for t in item.request.inputs}
        total = inputs["INPUT"] + inputs["INPUT_STATE"]
        outputs = [
            InferTensor(o.name, "INT32", (1, 1), total) for o in item.request.requested_outputs
        ]
        if not item.filler:
            done.append((item, InferResponse("sum", "1", outputs)))
    return done


def _run(states: SequenceStates, *batch: QueuedRequest) -> list[InferResponse]:
    asked = states.feed(list(batch))
    done = _execute(list(batch))
    states.keep(list(batch), asked, done)
    return [result for _, result in done if isinstance(result, InferResponse)]


def _sum(response: InferResponse) -> int:
    assert [t.name for t in response.outputs] == ["OUTPUT"]  # the state stays in the server
    return int(response.outputs[0].data.reshape(-1)[0])


def test_a_sequence_sums_from_its_start_and_others_keep_theirs() -> None:
    states = SequenceStates(_config())
    first, second = _run(
        states, _item(1, 7, sequence_start=True), _item(10, 8, sequence_start=True)
    )
    assert (_sum(first), _sum(second)) == (1, 10)
    first, second = _run(states, _item(2, 7), _item(20, 8))
    assert (_sum(first), _sum(second)) == (3, 30)
    # START again under a live id begins from zeros.
    (restarted,) = _run(states, _item(5, 7, sequence_start=True))
    assert _sum(restarted) == 5


def test_an_empty_slot_gets_the_initial_state_and_keeps_none() -> None:
    states = SequenceStates(_config())
    _run(states, _item(4, 7, sequence_start=True))
    filler = _item(0, 0, filler=True)
    batch = [filler, _item(1, 7)]
    asked = states.feed(batch)
    assert filler.request.inputs[-1].data.tolist() == [[0]]
    assert batch[1].request.inputs[-1].data.tolist() == [[4]]
    states.keep(batch, asked, _execute(batch))


def test_end_and_idle_release_forget_the_state() -> None:
    states = SequenceStates(_config())
    _run(states, _item(4, 7, sequence_start=True))
    _run(states, _item(4, 8, sequence_start=True))
    (ended,) = _run(states, _item(1, 7, sequence_end=True))
    assert _sum(ended) == 5
    states.drop(8)
    # A later request under either id (the scheduler refuses it without START: here only
    # the state is checked) starts from zeros.
    (after_end,) = _run(states, _item(1, 7))
    (after_idle,) = _run(states, _item(1, 8))
    assert (_sum(after_end), _sum(after_idle)) == (1, 1)


def test_what_a_request_asked_for_is_put_back() -> None:
    states = SequenceStates(_config())
    item = _item(1, 7, sequence_start=True)
    item.request.requested_outputs = [RequestedOutput("OUTPUT", binary=True)]
    asked = states.feed([item])
    assert [o.name for o in item.request.requested_outputs] == ["OUTPUT", "OUTPUT_STATE"]
    states.keep([item], asked, _execute([item]))
    assert item.request.requested_outputs == [RequestedOutput("OUTPUT", binary=True)]


def test_a_declared_state_output_is_returned() -> None:
    config = _config(_CONFIG.replace(
        'output [ { name: "OUTPUT"',
        'output [ { name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ] },\n'
        '         { name: "OUTPUT"',
    ))  # fmt: skip
    states = SequenceStates(config)
    (response,) = _run(states, _item(3, 7, sequence_start=True))
    assert sorted(t.name for t in response.outputs) == ["OUTPUT", "OUTPUT_STATE"]


def test_a_state_read_from_a_file_is_refused_at_load() -> None:
    config = _config(_CONFIG.replace(
        "dims: [ 1 ] } ]\n}",
        'dims: [ 1 ] initial_state [ { data_type: TYPE_INT32 dims: [ 1 ] data_file: "x" } ] } ]\n}',
    ))  # fmt: skip
    with pytest.raises(RepositoryError, match="data_file"):
        SequenceStates(config)


def test_a_failed_request_keeps_the_state_and_a_failed_end_drops_it() -> None:
    states = SequenceStates(_config())
    _run(states, _item(4, 7, sequence_start=True))
    failing = _item(100, 7)
    asked = states.feed([failing])
    states.keep([failing], asked, [(failing, ServingError("model failed"))])
    (kept,) = _run(states, _item(1, 7))
    assert _sum(kept) == 5
    end = _item(1, 7, sequence_end=True)
    asked = states.feed([end])
    states.keep([end], asked, [(end, ServingError("model failed"))])
    (after,) = _run(states, _item(1, 7))
    assert _sum(after) == 1
