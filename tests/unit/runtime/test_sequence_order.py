"""A sequence's requests run in the order they arrived, also when the sequence waited in the
backlog for a slot: a request that arrives just as the sequence gets its slot must not run
before the sequence's earlier requests, which are still waking up (found by Triton's
L0_sequence_stress through `thaw up`: an END run before its START, a running sum reset)."""

from __future__ import annotations

import asyncio
import threading

import numpy as np

from runtime.backends.base import ExecTimings
from runtime.errors import ServingError
from runtime.inference import InferRequest, InferResponse, InferTensor
from runtime.observe.stats import ModelStats
from runtime.scheduling.request_parameters import scheduling_parameters
from runtime.scheduling.sequence_scheduler import SequenceScheduler
from runtime.scheduling.sequence_table import Assigned, SequenceId
from tritonconfig.parse import parse_config

_CONFIG = """
name: "m"
max_batch_size: 1
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] }
  ]
}
input [ { name: "V" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


class _RunningSum:
    """A running sum per sequence (reset by START), as Triton's sequence test models keep;
    records the order it ran requests in. The first run waits for `gate`."""

    gil_bound = False
    used_image = False
    execute_async = None

    def __init__(self) -> None:
        self.name = "sum"
        self.timings = ExecTimings()
        self.gate = threading.Event()
        self.ran: list[tuple[SequenceId | None, int]] = []
        self._sums: dict[SequenceId | None, int] = {}

    def load(self, ctx: object) -> None: ...

    def unload(self) -> None: ...

    def execute(self, requests: list[InferRequest]) -> list[InferResponse | ServingError]:
        self.gate.wait(30)
        out: list[InferResponse | ServingError] = []
        for request in requests:
            sequence = scheduling_parameters(request.parameters).sequence_id
            tensors = {t.name: int(t.data.flat[0]) for t in request.inputs}
            if tensors["START"]:
                self._sums[sequence] = 0
            self._sums[sequence] = self._sums.get(sequence, 0) + tensors["V"]
            self.ran.append((sequence, tensors["V"]))
            data = np.array([[self._sums[sequence]]], np.int32)
            out.append(InferResponse("m", "1", [InferTensor("SUM", "INT32", (1, 1), data)]))
        return out


def _request(sequence: int, value: int, *, start: bool = False, end: bool = False) -> InferRequest:
    data = np.array([[value]], np.int32)
    parameters = {"sequence_id": sequence, "sequence_start": start, "sequence_end": end}
    return InferRequest("m", "1", [InferTensor("V", "INT32", (1, 1), data)], parameters=parameters)


async def _sum(scheduler: SequenceScheduler, request: InferRequest) -> int:
    params = scheduling_parameters(request.parameters)
    response = await scheduler.submit(request, batch_size=1, received_ns=0, params=params)
    return int(response.outputs[0].data.flat[0])


async def test_a_request_arriving_as_its_backlogged_sequence_gets_a_slot_runs_after_the_earlier_ones() -> (  # noqa: E501
    None
):
    backend = _RunningSum()
    scheduler = SequenceScheduler(
        "m", "1", [backend], ModelStats(), parse_config(_CONFIG, "config.pbtxt")
    )
    late: list[asyncio.Future[int]] = []
    place = scheduler._place

    def place_then_send_more(sequence: SequenceId, route: Assigned) -> None:
        # The moment the slot is given: sequence 2's waiting requests are woken, and its next
        # request (its END) arrives before they have run — as a stream's burst through the
        # activator's held queue does.
        place(sequence, route)
        late.append(asyncio.ensure_future(_sum(scheduler, _request(2, 100, end=True))))

    scheduler._place = place_then_send_more  # type: ignore[method-assign]
    try:
        # Sequence 1 holds the only slot; sequence 2's first two requests wait in the backlog.
        first = [
            asyncio.ensure_future(_sum(scheduler, _request(1, 5, start=True))),
            asyncio.ensure_future(_sum(scheduler, _request(1, 6, end=True))),
        ]
        await asyncio.sleep(0)
        second = [
            asyncio.ensure_future(_sum(scheduler, _request(2, 1, start=True))),
            asyncio.ensure_future(_sum(scheduler, _request(2, 10))),
        ]
        await asyncio.sleep(0.05)
        assert scheduler.live_sequences == 2  # one in the slot, one in the backlog
        backend.gate.set()
        assert await asyncio.gather(*first) == [5, 11]
        assert await asyncio.gather(*second) == [1, 11]
        assert len(late) == 1
        assert await late[0] == 111  # not 100: its sequence's START ran first
        assert [v for s, v in backend.ran if s == 2] == [1, 10, 100]
    finally:
        await asyncio.to_thread(scheduler.join)


async def test_requests_of_a_sequence_in_the_slot_go_straight_to_its_queue() -> None:
    """The usual case keeps its fast path: nothing waits, nothing is left behind."""
    backend = _RunningSum()
    backend.gate.set()
    scheduler = SequenceScheduler(
        "m", "1", [backend], ModelStats(), parse_config(_CONFIG, "config.pbtxt")
    )
    try:
        sums = await asyncio.gather(
            _sum(scheduler, _request(7, 1, start=True)),
            _sum(scheduler, _request(7, 2)),
            _sum(scheduler, _request(7, 3, end=True)),
        )
        assert sums == [1, 3, 6]
        assert scheduler._unqueued == {}
        assert scheduler.live_sequences == 0
    finally:
        await asyncio.to_thread(scheduler.join)
