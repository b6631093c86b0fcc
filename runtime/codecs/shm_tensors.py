"""One request's tensors in system shared memory: inputs read from, outputs written to regions.

Both codecs (runtime.codecs.rest for REST, runtime.codecs.protobuf for gRPC) decode a tensor's
`shared_memory_*` parameters (thawwire.shm_params) and ask a `ShmBinding` for its bytes; the
binding leases each region it touches from the server's registry (thawserver.shm_registry), so
a region stays registered while the request runs ("in use"), and the handler releases them
all once the response is encoded. Input bytes are copied out when decoded (the client may
reuse its region as soon as it has its answer, and a copy never faults); output bytes are
written when the response is encoded. The copies happen in the handler, around the model's
execution, so statistics count them nowhere else (Triton counts shm I/O inside compute).
"""

from __future__ import annotations

import numpy as np

from runtime.datatypes import from_wire
from runtime.errors import InvalidInput
from thawserver.shm_registry import Lease, SystemSharedMemory
from thawwire.errors import SharedMemoryError
from thawwire.shm_params import ShmRef, check_input_size

__all__ = ["ShmBinding", "refused"]


def refused(exc: SharedMemoryError) -> InvalidInput:
    """A registry refusal as the runtime's 400 (Triton's text)."""
    return InvalidInput(exc.message)


class ShmBinding:
    """The regions one request reads and writes; `release()` once, after the response."""

    __slots__ = ("_leases", "_registry", "outputs")

    def __init__(self, registry: SystemSharedMemory) -> None:
        self._registry = registry
        self._leases: list[Lease] = []
        self.outputs: dict[str, Lease] = {}

    def _lease(self, ref: ShmRef) -> Lease:
        try:
            lease = self._registry.lease(ref)
        except SharedMemoryError as exc:
            raise refused(exc) from None
        self._leases.append(lease)
        return lease

    def read_input(
        self, ref: ShmRef, name: str, datatype: str, shape: tuple[int, ...], model: str
    ) -> np.ndarray:
        """Input `name`'s array from its region; its size must be what the shape needs."""
        lease = self._lease(ref)
        try:
            check_input_size(ref, name, datatype, shape, model)
            data = lease.read()
        except SharedMemoryError as exc:
            raise refused(exc) from None
        return from_wire(data, name, datatype, shape)

    def bind_output(self, ref: ShmRef, name: str) -> None:
        """Output `name` goes to `ref`'s bytes (checked against its region now)."""
        self.outputs[name] = self._lease(ref)

    def write_output(self, name: str, data: bytes) -> None:
        """Write output `name`'s wire bytes into its region."""
        try:
            self.outputs[name].write(data, output=name)
        except SharedMemoryError as exc:
            raise refused(exc) from None

    def release(self) -> None:
        for lease in self._leases:
            lease.release()
        self._leases.clear()
