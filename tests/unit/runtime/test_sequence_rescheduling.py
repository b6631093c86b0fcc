"""The sequence scheduler's iterative sequences (Triton's request rescheduling), with a backend
that reschedules each request a given number of times and records what every run saw: the
sequence id and flags, the control tensors, the instance."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from runtime.backends.base import ExecTimings
from runtime.errors import InvalidInput, ModelErrorCancelled, ServingError
from runtime.inference import InferRequest, InferResponse, InferTensor
from runtime.observe.stats import ModelStats
from runtime.scheduling.request_parameters import scheduling_parameters
from runtime.scheduling.sequence_scheduler import SequenceScheduler
from tritonconfig.parse import parse_config
from tritonconfig.schema import mc

_CONFIG = """
name: "m"
max_batch_size: 0
sequence_batching {
  iterative_sequence: true
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
}
input [ { name: "RUNS" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


class _Rescheduling:
    """Runs a request RUNS times (rescheduled until then); records each run."""

    gil_bound = False
    used_image = False
    execute_async = None

    def __init__(self, name: str) -> None:
        self.name = name
        self.timings = ExecTimings()
        self.runs: list[tuple[object, bool, bool, list[str], int]] = []
        self._lock = threading.Lock()

    def load(self, ctx: object) -> None: ...

    def unload(self) -> None: ...

    def execute(self, requests: list[InferRequest]) -> list[InferResponse | ServingError]:
        out: list[InferResponse | ServingError] = []
        for request in requests:
            params = scheduling_parameters(request.parameters)
            names = [t.name for t in request.inputs]
            start = next(int(t.data.flat[0]) for t in request.inputs if t.name == "START")
            with self._lock:
                self.runs.append(
                    (params.sequence_id, params.sequence_start, params.sequence_end, names, start)
                )
                done = sum(1 for run in self.runs if run[0] == params.sequence_id)
            wanted = int(next(t for t in request.inputs if t.name == "RUNS").data.flat[0])
            if done < wanted:
                out.append(InferResponse("m", "1", [], id=request.id, rescheduled=True))
            else:
                data = np.array([done], np.int32)
                out.append(
                    InferResponse(
                        "m", "1", [InferTensor("OUT", "INT32", (1,), data)], id=request.id
                    )
                )
        return out


def _config() -> mc.ModelConfig:
    return parse_config(_CONFIG, "config.pbtxt")


def _request(runs: int, **parameters: object) -> InferRequest:
    data = np.array([runs], np.int32)
    return InferRequest(
        "m", "1", [InferTensor("RUNS", "INT32", (1,), data)], parameters=dict(parameters)
    )


async def _submit(scheduler: SequenceScheduler, request: InferRequest) -> InferResponse:
    params = scheduling_parameters(request.parameters)
    return await scheduler.submit(request, batch_size=1, received_ns=0, params=params)


async def test_a_rescheduled_request_runs_again_with_its_flags_cleared() -> None:
    backend = _Rescheduling("a")
    scheduler = SequenceScheduler("m", "1", [backend], ModelStats(), _config())
    try:
        response = await _submit(scheduler, _request(3))
        assert int(response.outputs[0].data[0]) == 3
        ids = {run[0] for run in backend.runs}
        assert len(ids) == 1 and 0 not in ids  # a sequence of its own, a real id
        # START (parameter and control) on the first run only; never END; the control tensors
        # made anew each run, never piled up.
        assert [(run[1], run[2], run[4]) for run in backend.runs] == [
            (True, False, 1), (False, False, 0), (False, False, 0),
        ]  # fmt: skip
        assert all(sorted(run[3]) == ["CORRID", "RUNS", "START"] for run in backend.runs)
        assert scheduler.live_sequences == 0  # the release ended the sequence
    finally:
        await asyncio.to_thread(scheduler.join)


async def test_sequences_of_their_own_stay_on_their_instance_and_apart() -> None:
    a, b = _Rescheduling("a"), _Rescheduling("b")
    scheduler = SequenceScheduler("m", "1", [a, b], ModelStats(), _config())
    try:
        answers = await asyncio.gather(*(_submit(scheduler, _request(n)) for n in (2, 3, 4, 5)))
        assert [int(r.outputs[0].data[0]) for r in answers] == [2, 3, 4, 5]
        for backend in (a, b):
            for sequence in {run[0] for run in backend.runs}:
                other = b if backend is a else a
                assert all(run[0] != sequence for run in other.runs)  # never moved
        assert len({run[0] for run in a.runs + b.runs}) == 4
    finally:
        await asyncio.to_thread(scheduler.join)


async def test_a_clients_iterative_sequence_ends_at_its_release() -> None:
    backend = _Rescheduling("a")
    scheduler = SequenceScheduler("m", "1", [backend], ModelStats(), _config())
    try:
        first = _request(2, sequence_id=77, sequence_start=True)
        assert int((await _submit(scheduler, first)).outputs[0].data[0]) == 2
        assert {run[0] for run in backend.runs} == {77}
        with pytest.raises(InvalidInput, match="must specify the START flag"):
            await _submit(scheduler, _request(1, sequence_id=77))
    finally:
        await asyncio.to_thread(scheduler.join)


async def test_an_own_id_skips_one_a_live_sequence_holds() -> None:
    backend = _Rescheduling("a")
    scheduler = SequenceScheduler("m", "1", [backend], ModelStats(), _config())
    try:
        # A client's sequence 1, in flight (its request is routed before the task first waits).
        client = asyncio.ensure_future(
            _submit(scheduler, _request(3, sequence_id=1, sequence_start=True))
        )
        await asyncio.sleep(0)
        own = _request(1)
        answers = await asyncio.gather(client, _submit(scheduler, own))
        assert [int(r.outputs[0].data[0]) for r in answers] == [3, 1]
        assert own.parameters["sequence_id"] == 2  # 1 was live: skipped
    finally:
        await asyncio.to_thread(scheduler.join)


class _GoneAfterFirstRun:
    """A decoupled request's sink whose reader leaves once the first run has happened."""

    def __init__(self, backend: _Rescheduling) -> None:
        self._backend = backend

    def send(self, item: object, *, final: bool) -> None: ...

    def cancelled(self) -> bool:
        return len(self._backend.runs) >= 1


async def test_a_request_whose_client_is_gone_is_not_run_again() -> None:
    backend = _Rescheduling("a")
    scheduler = SequenceScheduler("m", "1", [backend], ModelStats(), _config())
    try:
        request = _request(5)
        request.response_sink = _GoneAfterFirstRun(backend)
        with pytest.raises(ModelErrorCancelled):
            await _submit(scheduler, request)
        assert len(backend.runs) == 1
        assert scheduler.live_sequences == 0
    finally:
        await asyncio.to_thread(scheduler.join)
