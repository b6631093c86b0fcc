"""Triton's sequence batcher in a real `thaw serve`: routing, order, controls, idle release.

The model keeps a running sum per sequence in the instance that holds it
(tests/fixtures/sequence_models.py `make_sequence_accumulator`): a sum that comes out right proves
that every request of a sequence reached the same instance, in order, with the START control
on its first request.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures import sequence_models
from tests.fixtures.serve_process import ServeProcess
from tests.support.scheduling_client import Answer, Later, fp32, infer

pytestmark = pytest.mark.integration


# `forgetful` releases a sequence idle this long: long enough that the step the test sends
# right after another comes in time on a loaded machine too (0.3 s before left no margin).
_FORGETFUL_IDLE_S = 2.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repo = tmp_path_factory.mktemp("sequence_batching")
    sequence_models.make_sequence_accumulator(repo, "direct")
    sequence_models.make_sequence_accumulator(
        repo, "oldest", strategy="oldest { max_candidate_sequences: 4 }"
    )
    sequence_models.make_sequence_accumulator(repo, "one_slot", instance_count=1, max_batch_size=0)
    sequence_models.make_sequence_accumulator(
        repo, "forgetful", idle_us=int(_FORGETFUL_IDLE_S * 1e6)
    )
    sequence_models.make_sequence_accumulator(repo, "named", corrid_type="TYPE_STRING")
    proc = ServeProcess(repo)
    try:
        proc.wait_ready()
        yield proc
    finally:
        rc = proc.stop()
    assert rc == 0, proc.logs()


def _step(server: ServeProcess, model: str, sequence: Any, value: float, **flags: bool) -> Answer:
    batched = model != "one_slot"
    parameters = {"sequence_id": sequence, **flags}
    return infer(
        server.url, model, [fp32("INPUT", [value], batched=batched)], parameters=parameters
    )


def _flags(index: int, count: int) -> dict[str, bool]:
    return {"sequence_start": index == 0, "sequence_end": index == count - 1}


@pytest.mark.parametrize("model", ["direct", "oldest"])
def test_interleaved_sequences_each_keep_one_instance_and_their_order(
    server: ServeProcess, model: str
) -> None:
    values = {101: [1.0, 2.0, 3.0, 4.0], 202: [10.0, 20.0, 30.0, 40.0], 303: [5.0] * 4}
    sums: dict[int, list[float]] = {seq: [] for seq in values}
    instances: dict[int, set[str]] = {seq: set() for seq in values}
    for index in range(4):  # one request of each sequence per round, all at once
        calls = {
            seq: Later(
                server.url,
                model,
                [fp32("INPUT", [vals[index]])],
                parameters={"sequence_id": seq, **_flags(index, 4)},
            )
            for seq, vals in values.items()
        }
        for seq, call in calls.items():
            answer = call.result()
            assert answer.status == 200, answer.doc
            sums[seq].append(answer.output("SUM")[0])
            instances[seq].add(answer.output("INSTANCE")[0])
            assert answer.output("READY_SEEN") == [1]
            assert answer.output("START_SEEN") == [int(index == 0)]
    for seq, vals in values.items():
        running = [sum(vals[: i + 1]) for i in range(4)]
        assert sums[seq] == running, (seq, sums[seq])
        assert len(instances[seq]) == 1  # one instance for the whole sequence
    assert len(set().union(*instances.values())) == 2  # and they spread over both


def test_a_sequence_without_start_is_refused_in_tritons_words(server: ServeProcess) -> None:
    answer = _step(server, "direct", 777, 1.0)
    assert answer.status == 400
    assert (
        "inference request for sequence 777 to model 'direct' must specify the START flag on "
        "the first request of the sequence" in answer.error
    )


def test_a_new_sequence_waits_for_a_slot_until_the_holder_ends(server: ServeProcess) -> None:
    first = _step(server, "one_slot", 1, 1.0, sequence_start=True)
    assert first.status == 200
    waiting = Later(
        server.url,
        "one_slot",
        [fp32("INPUT", [5.0], batched=False)],
        parameters={"sequence_id": 2, "sequence_start": True, "sequence_end": True},
    )
    time.sleep(0.4)
    assert not waiting.done()  # the only slot is held by sequence 1
    last = _step(server, "one_slot", 1, 2.0, sequence_end=True)
    assert last.status == 200 and last.output("SUM") == [3.0]
    moved_in = waiting.result(10)
    assert moved_in.status == 200 and moved_in.output("SUM") == [5.0]


def test_an_idle_sequence_is_released_after_max_sequence_idle(server: ServeProcess) -> None:
    assert _step(server, "forgetful", 9, 1.0, sequence_start=True).status == 200
    assert _step(server, "forgetful", 9, 1.0).status == 200  # within the idle limit: live
    time.sleep(_FORGETFUL_IDLE_S + 0.5)
    late = _step(server, "forgetful", 9, 1.0)
    assert late.status == 400 and "must specify the START flag" in late.error


def test_string_sequence_ids_reach_a_string_corrid_control(server: ServeProcess) -> None:
    sums = [
        _step(server, "named", "session-a", v, **_flags(i, 3)).output("SUM")[0]
        for i, v in enumerate([1.0, 1.0, 1.0])
    ]
    assert sums == [1.0, 2.0, 3.0]


@pytest.mark.parametrize(
    ("model", "sequence_id", "fragment"),
    [
        ("direct", "session-a", "data-type is 'BYTES', but model 'direct' expects 'UINT64'"),
        ("named", 12, "data-type is 'UINT64', but model 'named' expects 'BYTES'"),
        ("direct", 1.5, "Unable to parse 'sequence_id'"),
        ("direct", [1], "Unable to parse 'sequence_id'"),
        ("direct", -3, "Unable to parse 'sequence_id'"),
        ("direct", 0, "must specify a non-zero or non-empty correlation ID"),
        ("direct", "", "must specify a non-zero or non-empty correlation ID"),
    ],
)
def test_sequence_ids_of_the_wrong_type_are_400(
    server: ServeProcess, model: str, sequence_id: Any, fragment: str
) -> None:
    answer = _step(server, model, sequence_id, 1.0, sequence_start=True)
    assert answer.status == 400, answer.doc
    assert fragment in answer.error


def test_bad_sequence_flags_and_a_missing_id_are_400(server: ServeProcess) -> None:
    flag = infer(
        server.url,
        "direct",
        [fp32("INPUT", [1.0])],
        parameters={"sequence_id": 5, "sequence_start": "yes"},
    )
    assert flag.status == 400 and "Unable to parse 'sequence_start'" in flag.error
    none = infer(server.url, "direct", [fp32("INPUT", [1.0])])
    assert none.status == 400
    assert "must specify a non-zero or non-empty correlation ID" in none.error
    two_rows = infer(
        server.url,
        "direct",
        [{"name": "INPUT", "datatype": "FP32", "shape": [2, 1], "data": [1.0, 2.0]}],
        parameters={"sequence_id": 5, "sequence_start": True},
    )
    assert two_rows.status == 400 and "must specify batch-size 1" in two_rows.error


def test_a_client_may_not_send_the_control_tensors_itself(server: ServeProcess) -> None:
    answer = infer(
        server.url,
        "direct",
        [fp32("INPUT", [1.0]), fp32("START", [1.0])],
        parameters={"sequence_id": 8, "sequence_start": True},
    )
    # Refused as Triton's core refuses any input past the config's: counted first (2.51).
    assert answer.status == 400 and answer.error == (
        "expected 1 inputs but got 2 inputs for model 'direct'. Got input(s) "
        "['START','INPUT'], but missing required input(s) ]. Please provide all required "
        "input(s)."
    )
