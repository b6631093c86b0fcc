"""Triton's dynamic batcher and queue policies in a real `thaw serve`, over HTTP.

The models sleep for a set time per execution and report the batch each request ran in
(tests/fixtures/batch_recorder.py `make_batch_recorder`), so batching, ordering and deadlines are
visible to the client. Timings are asserted with margins for a loaded 2-core machine: what
must happen "at once" gets well under the model's execution time, what waits gets at least
most of its delay.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.fakes.loop import HUNG_AFTER_S
from tests.fixtures import batch_recorder, models, onnx_models
from tests.fixtures.serve_process import ServeProcess
from tests.support.scheduling_client import Later, fp32, infer, metric

pytestmark = pytest.mark.integration

ONE = [fp32("INPUT0", [1.0, 2.0, 3.0])]


def _policy(text: str) -> str:
    return f"dynamic_batching {{ {text} }}"


# Models with one request per execution (max_batch_size 1): what these test is the queue. Each
# test holds its first execution (`_held`) while it queues the others, by events, not inside
# that execution's seconds, which a loaded machine could let pass first.
_QUEUES = {
    "bounded": (0.8, "default_queue_policy { max_queue_size: 1 }"),
    "reject": (1.2, "default_queue_policy { default_timeout_microseconds: 150000 }"),
    "override": (
        0.6,
        "default_queue_policy { default_timeout_microseconds: 3000000 "
        "allow_timeout_override: true }",
    ),
    # The first execution is held until the late request's 2 s queue deadline passed and the
    # punctual one is queued; the punctual one then has 2 s to be taken.
    "delayed": (
        0.2,
        "default_queue_policy { default_timeout_microseconds: 2000000 timeout_action: DELAY }",
    ),
    "prioritized": (1.0, "priority_levels: 2 default_priority_level: 2"),
}


def _hold_file(repo: Path, model: str) -> Path:
    """While this file exists, `model`'s executions wait (make_batch_recorder's hold_file)."""
    return repo.parent / f"{repo.name}.{model}.hold"


@contextmanager
def _held(server: ServeProcess, model: str) -> Iterator[None]:
    """`model`'s executions wait while the block runs (at most HUNG_AFTER_S)."""
    hold = _hold_file(server.repo, model)
    hold.write_text(str(HUNG_AFTER_S))
    try:
        yield
    finally:
        hold.unlink()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repo = tmp_path_factory.mktemp("dynamic_batching")
    rec = batch_recorder.make_batch_recorder
    rec(repo, "together", delay_s=0.3, scheduling=_policy("max_queue_delay_microseconds: 200000"))
    rec(repo, "lone", scheduling=_policy("max_queue_delay_microseconds: 300000"))
    rec(repo, "shapes", delay_s=0.2, scheduling=_policy("max_queue_delay_microseconds: 150000"))
    for name, (delay_s, policy) in _QUEUES.items():
        rec(repo, name, delay_s=delay_s, max_batch_size=1, scheduling=_policy(policy),
            hold_file=_hold_file(repo, name))  # fmt: skip
    rec(repo, "two_instances", delay_s=0.6, instance_count=2, scheduling="")
    rec(repo, "on_gpus", delay_s=0.6, scheduling="",
        instance_group="{ count: 2 kind: KIND_GPU gpus: [ 0, 1 ] }")  # fmt: skip
    onnx_models.make_onnx_batched_add(
        repo, "onnx_batched", scheduling=_policy("max_queue_delay_microseconds: 300000")
    )
    proc = ServeProcess(repo)
    try:
        proc.wait_ready()
        yield proc
    finally:
        rc = proc.stop()
    assert rc == 0, proc.logs()


def _rejected(server: ServeProcess, model: str) -> float:
    return metric(server.url, "nv_inference_request_failure", model=model, reason="REJECTED")


def _until(condition: Callable[[], bool], what: str, within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {within_s} s"
        time.sleep(0.01)


def _queued(server: ServeProcess, model: str, count: int) -> None:
    """Until `count` requests of `model` wait in its queue (not yet executing)."""
    _until(lambda: metric(server.url, "nv_inference_pending_request_count", model=model) == count,
           f"{count} requests of {model} queued")  # fmt: skip


def _all_at_once(server: ServeProcess, model: str, count: int, inputs: list) -> list:  # type: ignore[type-arg]
    calls = [Later(server.url, model, inputs) for _ in range(count)]
    return [call.result() for call in calls]


def test_concurrent_requests_run_as_one_execution(server: ServeProcess) -> None:
    answers = _all_at_once(server, "together", 6, ONE)
    assert all(a.status == 200 for a in answers), [a.doc for a in answers]
    assert all(a.output("OUTPUT0") == [1.0, 2.0, 3.0] for a in answers)
    batches = sorted(a.output("BATCH")[0] for a in answers)
    assert max(batches) >= 3, batches  # most of them ran together
    executions = {a.output("EXECUTION")[0] for a in answers}
    assert len(executions) < 6
    # Triton's metrics show the batching: more inferences than executions.
    inferences = metric(server.url, "nv_inference_count", model="together")
    executed = metric(server.url, "nv_inference_exec_count", model="together")
    assert inferences == 6 and executed == len(executions) < inferences
    stats = httpclient.InferenceServerClient(server.hostport).get_inference_statistics("together")
    batch_sizes = {row["batch_size"] for row in stats["model_stats"][0]["batch_stats"]}
    assert max(batch_sizes) >= 3


def test_a_lone_request_waits_the_queue_delay_and_no_longer(server: ServeProcess) -> None:
    answer = infer(server.url, "lone", ONE)
    assert answer.status == 200
    assert answer.output("BATCH") == [1]
    # The 0.3 s delay, then it goes alone. A loaded machine only adds to it: the upper bound
    # catches a wait for a batch that never fills (or a delay read in the wrong unit), not speed.
    assert 0.25 <= answer.elapsed_s < HUNG_AFTER_S, answer.elapsed_s
    queued_us = metric(server.url, "nv_inference_queue_duration_us", model="lone")
    assert queued_us >= 250_000


def test_requests_of_different_shapes_do_not_share_an_execution(server: ServeProcess) -> None:
    short = [fp32("INPUT0", [1.0, 2.0])]
    long = [fp32("INPUT0", [1.0, 2.0, 3.0, 4.0, 5.0])]
    calls = [Later(server.url, "shapes", inputs) for inputs in (short, long, short, long)]
    answers = [call.result() for call in calls]
    assert [len(a.output("OUTPUT0")) for a in answers] == [2, 5, 2, 5]
    by_shape: dict[int, set[int]] = {}
    for a in answers:
        by_shape.setdefault(len(a.output("OUTPUT0")), set()).add(a.output("EXECUTION")[0])
    assert not by_shape[2] & by_shape[5]  # never the same execution


def test_a_full_queue_refuses_at_once_with_503_and_counts_as_rejected(
    server: ServeProcess,
) -> None:
    with _held(server, "bounded"):
        begun = models.begun(server.repo / "bounded")
        running = Later(server.url, "bounded", ONE)
        models.wait_begun(server.repo / "bounded", begun)
        queued = Later(server.url, "bounded", ONE)  # the one place in the queue
        _queued(server, "bounded", 1)
        refused = infer(server.url, "bounded", ONE)
    assert refused.status == 503, refused.doc
    assert "Exceeds maximum queue size" in refused.error
    assert running.result().status == 200 and queued.result().status == 200
    # At once, not when the instance freed up: answered while the first still executed.
    assert refused.finished_at < running.result().output("FINISHED")[0]
    assert _rejected(server, "bounded") == 1


def test_a_reject_timeout_answers_503_at_its_deadline(server: ServeProcess) -> None:
    with _held(server, "reject"):
        begun = models.begun(server.repo / "reject")
        running = Later(server.url, "reject", ONE)
        models.wait_begun(server.repo / "reject", begun)
        timed_out = infer(server.url, "reject", ONE)  # queued behind it, deadline 0.15 s
    assert timed_out.status == 503, timed_out.doc
    assert "Request timeout expired" in timed_out.error
    assert timed_out.elapsed_s >= 0.15, timed_out.elapsed_s  # not before its deadline
    assert running.result().status == 200
    # At its deadline, not when the instance freed up.
    assert timed_out.finished_at < running.result().output("FINISHED")[0]
    assert _rejected(server, "reject") == 1


def test_a_request_timeout_can_shorten_the_default_but_never_lengthen_it(
    server: ServeProcess,
) -> None:
    with _held(server, "override"):
        begun = models.begun(server.repo / "override")
        running = Later(server.url, "override", ONE)
        models.wait_begun(server.repo / "override", begun)
        hasty = infer(server.url, "override", ONE, parameters={"timeout": 100_000})
    assert hasty.status == 503, hasty.doc
    # Its own 0.1 s, not the 3 s default: answered while the first still executed.
    assert hasty.finished_at < running.result().output("FINISHED")[0]
    # A huge timeout does not lengthen the 3 s default: it waits for the instance and runs.
    patient = infer(server.url, "override", ONE, parameters={"timeout": 2**64 - 1})
    assert patient.status == 200
    assert running.result().status == 200


def test_a_delay_timeout_moves_a_request_behind_the_ones_still_in_time(
    server: ServeProcess,
) -> None:
    with _held(server, "delayed"):
        begun = models.begun(server.repo / "delayed")
        running = Later(server.url, "delayed", ONE)
        models.wait_begun(server.repo / "delayed", begun)
        late = Later(server.url, "delayed", ONE)  # times out in the queue after 2 s: DELAY
        _queued(server, "delayed", 1)
        time.sleep(2.1)  # the subject: late's 2 s queue deadline passes
        punctual = Later(server.url, "delayed", ONE)  # still in time when the instance frees
        _queued(server, "delayed", 2)
    answers = [running.result(), late.result(), punctual.result()]
    assert all(a.status == 200 for a in answers)  # DELAY never rejects
    first, late_run, punctual_run = (a.output("EXECUTION")[0] for a in answers)
    assert first < punctual_run < late_run


def test_a_higher_priority_request_overtakes_a_queued_lower_one(server: ServeProcess) -> None:
    with _held(server, "prioritized"):
        begun = models.begun(server.repo / "prioritized")
        running = Later(server.url, "prioritized", ONE)
        models.wait_begun(server.repo / "prioritized", begun)
        low = Later(server.url, "prioritized", ONE, parameters={"priority": 2})
        _queued(server, "prioritized", 1)
        high = Later(server.url, "prioritized", ONE, parameters={"priority": 1})
        _queued(server, "prioritized", 2)
    answers = [running.result(), low.result(), high.result()]
    assert all(a.status == 200 for a in answers)
    assert answers[2].output("EXECUTION")[0] < answers[1].output("EXECUTION")[0]


@pytest.mark.parametrize(
    ("parameters", "fragment"),
    [
        ({"priority": "high"}, "Unable to parse 'priority'"),
        ({"priority": -1}, "Unable to parse 'priority'"),
        ({"priority": True}, "Unable to parse 'priority'"),
        ({"priority": 2**64}, "Unable to parse 'priority'"),
        ({"timeout": -5}, "Unable to parse 'timeout'"),
        ({"timeout": 1.5}, "Unable to parse 'timeout'"),
        ({"timeout": 10**30}, "Unable to parse 'timeout'"),
    ],
)
def test_bad_priority_and_timeout_values_are_400(
    server: ServeProcess,
    parameters: dict,
    fragment: str,  # type: ignore[type-arg]
) -> None:
    answer = infer(server.url, "lone", ONE, parameters=parameters)
    assert answer.status == 400, answer.doc
    assert fragment in answer.error


def test_a_priority_past_the_levels_queues_at_the_default_level(server: ServeProcess) -> None:
    answer = infer(server.url, "prioritized", ONE, parameters={"priority": 99})
    assert answer.status == 200  # Triton: out of range means the default level


def _overlapped(answers: list) -> bool:  # type: ignore[type-arg]
    """Every execution began before any of them ended: all were in flight at once."""
    return max(a.output("STARTED")[0] for a in answers) < min(
        a.output("FINISHED")[0] for a in answers
    )


def test_instances_of_one_model_execute_concurrently(server: ServeProcess) -> None:
    answers = _all_at_once(server, "two_instances", 2, ONE)
    assert all(a.status == 200 for a in answers)
    assert {a.output("INSTANCE")[0] for a in answers} == {"two_instances_0_0", "two_instances_0_1"}
    assert _overlapped(answers)  # side by side (each sleeps 0.6 s), not one after the other


def test_a_gpu_group_places_count_instances_on_each_of_its_gpus(server: ServeProcess) -> None:
    """Triton's placement: `count: 2, gpus: [0, 1]` is four instances, two per GPU (a Python
    model needs no CUDA to be given its device id)."""
    answers = _all_at_once(server, "on_gpus", 4, ONE)
    assert all(a.status == 200 for a in answers)
    assert len({a.output("INSTANCE")[0] for a in answers}) == 4
    assert sorted(a.output("DEVICE")[0] for a in answers) == [0, 0, 1, 1]
    assert _overlapped(answers)  # four at once, not one after another


def test_an_onnx_model_runs_a_dynamic_batch_and_answers_each_request_its_rows(
    server: ServeProcess,
) -> None:
    client = httpclient.InferenceServerClient(server.hostport, concurrency=8)
    try:
        sent, handles = [], []
        for i in range(6):
            rows = 1 + i % 2  # requests of 1 and 2 rows in one batch
            data = np.full((rows, 4), float(i), dtype=np.float32)
            tensor = httpclient.InferInput("INPUT0", [rows, 4], "FP32")
            tensor.set_data_from_numpy(data)
            sent.append(data)
            handles.append(client.async_infer("onnx_batched", [tensor]))
        outputs = [h.get_result().as_numpy("OUTPUT0") for h in handles]
        weight = outputs[0][0] - sent[0][0]
        for data, out in zip(sent, outputs, strict=True):
            assert out.shape == data.shape
            np.testing.assert_allclose(out, data + weight, rtol=1e-6)
        stats = client.get_inference_statistics("onnx_batched")["model_stats"][0]
        assert stats["inference_count"] == 9
        assert stats["execution_count"] < 6
        assert max(b["batch_size"] for b in stats["batch_stats"]) > 2
    finally:
        client.close()
