"""Triton's Python models (`model.py` files, unchanged): in the server, or a stub process each.

`pb_utils`, `pb_tensors`, `pb_metrics`, `pb_logging`, `pb_model_config`, `pb_request_args`,
`host` and `stub/` are imported by stub processes under the model's own interpreter
(`EXECUTION_ENV_PATH`), which may hold only numpy: they import nothing else of the runtime's
dependencies (an import-linter contract), and neither does this `__init__`.

    pb_utils         the `triton_python_backend_utils` module models import
    pb_tensors       pb_utils' tensors, errors and datatype tables (no host needed)
    pb_metrics       pb_utils' custom metrics: MetricFamily and Metric
    pb_logging       pb_utils' model logger: Logger and LogLevel
    pb_model_config  pb_utils' ModelConfig: what a model's auto_complete_config may set
    pb_request_args  pb_utils' InferenceRequest argument checks, in Triton's words
    host             the ModelHost Protocol: what a model's `pb_utils` calls reach
    server_host      the server as `pb_utils` reaches it: BLS on the loop, metrics, logs
    backend          the python backend: a model in the server process or in stub processes
    auto_complete    a model's auto_complete_config, run in a process of its own
    placement        where a Python model's instances run: stub processes or in the server
    model_io         a model's I/O as both ways see it: errors, `args`, output types
    stub_backend     a model instance in its own stub process: started, relayed, restarted
    stub_answers     where a stub's messages go: executes' answers, requests' responses
    stub_process     start a stub process: its interpreter, its socket
    spare_stubs      stub processes started ahead, taken by the first loads
    stub_services    what a stub asks of the server (BLS, calls, logs), on the loop
    loop_channel     the server's end of a stub's channel, driven by the event loop
    stub/            the stub process itself (runs under the model's interpreter)
    pytorch_runtime/  the PyTorch backend's Python runtime (`runtime: "model.py"`), a model file

Exports `PythonBackend` (imported on first use).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.python.backend import PythonBackend

__all__ = ["PythonBackend"]

# Each export and the module that defines it, imported on first use (PEP 562), so that importing
# one module of this package does not import the others.
_EXPORTS = {
    "PythonBackend": "runtime.python.backend",
}


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
