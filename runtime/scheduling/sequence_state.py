"""A stateful model's implicit state (`sequence_batching.state`): each sequence's tensors, fed
to the model as inputs and taken back from its outputs.

    feed(batch)   before execute: each request gets its sequence's state as `input_name`
                  (the initial state at START, or for a slot's READY-false placeholder), and
                  asks for every `output_name`
    keep(done)    after execute: each response's `output_name` becomes its sequence's state;
                  the state outputs the client did not ask for are taken out of the response,
                  and the sequence's state is dropped after its END request
    drop(id)      a sequence released for idleness

As Triton: the initial state is zeros of the state's dims (a variable dim is 1; empty strings
for TYPE_STRING) unless `initial_state { zero_data }` gives its dims; shaped `[1, *dims]` for a
batching model. A state output is returned to a client only if the model's config declares it
as an output (Triton's "unexpected inference output" otherwise, checked before scheduling).
Called from one instance's worker thread per sequence (a sequence keeps its instance), and
`drop` from the event loop: the table is guarded by a lock.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from runtime.datatypes import config_to_v2, v2_to_numpy
from runtime.errors import RepositoryError
from runtime.inference import InferResponse, InferTensor, RequestedOutput
from runtime.scheduling.batch_execution import Outcome, QueuedRequest
from runtime.scheduling.request_parameters import scheduling_parameters
from runtime.scheduling.sequence_table import SequenceId
from tritonconfig.schema import mc

__all__ = ["SequenceStates"]


@dataclass(frozen=True, slots=True)
class _State:
    input_name: str
    output_name: str
    datatype: str  # v2
    initial: np.ndarray  # with the batch dimension when the model batches


class SequenceStates:
    """One model version's implicit state, per live sequence."""

    def __init__(self, config: mc.ModelConfig) -> None:
        batched = config.max_batch_size > 0
        states = config.sequence_batching.state
        self._states = [_state(config.name, s, batched=batched) for s in states]
        self._declared = frozenset(o.name for o in config.output)
        self._outputs = [o.name for o in config.output]
        self._values: dict[SequenceId, dict[str, np.ndarray]] = {}
        self._output_names = [s.output_name for s in self._states]
        self._lock = threading.Lock()  # feed/keep on a worker thread, drop on the loop

    def __bool__(self) -> bool:
        return bool(self._states)

    def feed(self, batch: Sequence[QueuedRequest]) -> list[list[RequestedOutput]]:
        """Add each request's state inputs and outputs; returns what each request asked for,
        for `keep` to put back."""
        asked = []
        for item in batch:
            request = item.request
            values: dict[str, np.ndarray] = {}
            if not item.filler:
                params = scheduling_parameters(request.parameters)
                if not params.sequence_start and params.sequence_id is not None:
                    with self._lock:
                        values = self._values.get(params.sequence_id, {})
            for state in self._states:
                data = values.get(state.output_name, state.initial)
                request.inputs.append(
                    InferTensor(state.input_name, state.datatype, tuple(data.shape), data)
                )
            asked.append(request.requested_outputs)
            request.requested_outputs = self._with_states(request.requested_outputs)
        return asked

    def _with_states(self, asked: list[RequestedOutput]) -> list[RequestedOutput]:
        """The state outputs added to what a request asks for (to every declared output when
        it asks for none: what the backend would return)."""
        names = [o.name for o in asked] or self._outputs
        extra = [RequestedOutput(name) for name in self._output_names if name not in names]
        return [*(asked or [RequestedOutput(name) for name in names]), *extra]

    def keep(
        self,
        batch: Sequence[QueuedRequest],
        asked: list[list[RequestedOutput]],
        done: list[Outcome],
    ) -> None:
        """Store each sequence's new state (dropped after its END request, answered or
        failed; a failed request leaves it as it was); put back what each request asked for,
        and take out of its response the state outputs it did not."""
        for item, outputs in zip(batch, asked, strict=True):
            item.request.requested_outputs = outputs
        for item, result in done:
            new: dict[str, np.ndarray] = {}
            if isinstance(result, InferResponse):
                wanted = {o.name for o in item.request.requested_outputs} or self._declared
                new = {t.name: t.data for t in result.outputs if t.name in self._output_names}
                result.outputs = [
                    t
                    for t in result.outputs
                    if t.name not in self._output_names or t.name in wanted
                ]
            params = scheduling_parameters(item.request.parameters)
            if params.sequence_id is None:
                continue
            with self._lock:
                if params.sequence_end:
                    self._values.pop(params.sequence_id, None)
                elif new:
                    self._values[params.sequence_id] = new

    def drop(self, sequence: SequenceId) -> None:
        with self._lock:
            self._values.pop(sequence, None)


def _state(model: str, state: mc.ModelSequenceBatching.State, *, batched: bool) -> _State:
    """One `state` entry and its initial value (Triton's zeros, or `initial_state`)."""
    datatype = config_to_v2(mc.DataType.Name(state.data_type))
    dims = [max(1, int(d)) for d in state.dims]
    for initial in state.initial_state:
        if initial.WhichOneof("state_data") != "zero_data":
            raise RepositoryError(
                f"model '{model}': implicit state '{state.input_name}': only "
                "`initial_state { zero_data }` is supported by Thaw (not `data_file`)"
            )
        dims = [int(d) for d in initial.dims]
    shape = (1, *dims) if batched else tuple(dims)
    if datatype == "BYTES":
        data = np.full(shape, b"", dtype=np.object_)
    else:
        data = np.zeros(shape, dtype=v2_to_numpy(datatype))
    return _State(state.input_name, state.output_name, datatype, data)
