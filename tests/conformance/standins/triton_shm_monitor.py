"""Stand-in for Triton's `triton_shm_monitor`, on the path of the QA tests the runners start.

Triton's is a C extension of python_backend (src/shm_monitor) that reads the free bytes of the
Python backend's own shared-memory regions, `/dev/shm/triton_python_backend_shm_region*`;
qa/common/shm_util.ShmLeakDetector imports it and monitors each region by that name it finds,
to catch leaks in Triton's stub transport. Thaw's Python stubs make no region by that name, so
the detector finds none to monitor and its probes check nothing of Thaw's (they still sleep
their second before and after, as in Triton's runs). This module only lets it import: should a
region by that name ever exist, monitoring it is refused, never answered with made-up numbers.
"""

from __future__ import annotations


class SharedMemoryManager:
    def __init__(self, name: str) -> None:
        raise RuntimeError(
            f"/dev/shm/{name} is named like a Triton Python-backend region, which Thaw does not "
            "make; this stand-in cannot read it"
        )
