"""The control tensors a sequence model receives with each request: START, END, READY, CORRID.

Built from the model's `sequence_batching.control_input` (tritonconfig.sequence): boolean
controls hold the config's true or false value, CORRID the sequence id (an integer truncated
to a 32-bit type when the config asks for one, or a string). Each is one element, shaped `[1]`,
or `[1, 1]` with the batch dimension of a batching model, as Triton sends them. A batch slot
without a request (direct strategy) gets READY false and START/END false.
"""

from __future__ import annotations

import numpy as np

from runtime.datatypes import config_to_v2, v2_to_numpy
from runtime.errors import InvalidInput
from runtime.inference import InferRequest, InferTensor
from runtime.scheduling.request_parameters import SchedulingParameters
from tritonconfig import ControlKind, SequenceControl, sequence_controls
from tritonconfig.schema import mc

__all__ = ["SequenceControls"]

_INT_TYPES = {"TYPE_UINT64": 64, "TYPE_INT64": 64, "TYPE_UINT32": 32, "TYPE_INT32": 32}


class SequenceControls:
    """Adds one model's control tensors to its requests."""

    def __init__(self, config: mc.ModelConfig) -> None:
        self._model = config.name
        self._controls = sequence_controls(config)
        self.names = frozenset(control.name for control in self._controls.values())
        self._shape: tuple[int, ...] = (1, 1) if config.max_batch_size > 0 else (1,)
        corrid = self._controls.get(ControlKind.CORRID)
        self._corrid_type = corrid.data_type if corrid is not None else None

    def check_id(self, sequence_id: int | str) -> None:
        """InvalidInput when the id's type is not the CORRID control's (Triton's text)."""
        expected = self._corrid_type
        if expected is None:
            return
        got = "BYTES" if isinstance(sequence_id, str) else "UINT64"
        if (got == "BYTES") != (expected == "TYPE_STRING"):
            control = self._controls[ControlKind.CORRID].name
            raise InvalidInput(
                f"sequence batching control '{control}' data-type is '{got}', but model "
                f"'{self._model}' expects '{config_to_v2(expected)}'"
            )

    def add(self, request: InferRequest, params: SchedulingParameters, *, ready: bool) -> None:
        """Append the control tensors for one request of the sequence `params` names."""
        flags = {
            ControlKind.START: params.sequence_start and ready,
            ControlKind.END: params.sequence_end and ready,
            ControlKind.READY: ready,
        }
        for kind, control in self._controls.items():
            if kind == ControlKind.CORRID:
                assert params.sequence_id is not None  # a sequence request always has one
                request.inputs.append(self._corrid(control, params.sequence_id))
            else:
                request.inputs.append(self._flag(control, flags[kind]))

    def _flag(self, control: SequenceControl, value: bool) -> InferTensor:
        assert control.false_true is not None  # boolean controls carry both values
        datatype = config_to_v2(control.data_type)
        data = np.full(self._shape, control.false_true[int(value)], dtype=v2_to_numpy(datatype))
        return InferTensor(control.name, datatype, self._shape, data)

    def _corrid(self, control: SequenceControl, sequence_id: int | str) -> InferTensor:
        datatype = config_to_v2(control.data_type)
        if control.data_type == "TYPE_STRING":
            data = np.empty(self._shape, dtype=np.object_)
            data.flat[0] = str(sequence_id).encode()
        else:
            bits = _INT_TYPES[control.data_type]
            value = int(sequence_id) & ((1 << bits) - 1)  # Triton keeps the low-order bits
            dtype = v2_to_numpy(datatype)
            data = np.array(value, dtype=np.uint64).astype(dtype).reshape(self._shape)
        return InferTensor(control.name, datatype, self._shape, data)
