"""What a Python model's `pb_utils` calls reach: BLS, custom metrics, logs, the model loading API.

`ModelHost` is the seam between Triton's module-level API (runtime.python.pb_utils)
and whoever serves it: the server itself for in-process models (runtime.python.server_host), or the
stub's control channel in a stub process (runtime.python.stub.stub_host). Every method may be called
from any thread of a model. BLS failures come back as responses carrying a `TritonError`, as
Triton's do, never as exceptions. Stdlib only: stub processes import it under another Python.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, Protocol

from runtime.observe.custom_metrics import CustomMetrics

__all__ = ["LOG_LEVELS", "InProcessHost", "ModelHost", "log_model_line"]

# pb_utils.LogLevel (INFO, WARNING, ERROR, VERBOSE) -> logging levels.
LOG_LEVELS = {0: logging.INFO, 1: logging.WARNING, 2: logging.ERROR, 3: logging.DEBUG}

_model_log = logging.getLogger("triton_python_backend_utils")


class ModelHost(Protocol):
    """The server as a Python model's pb_utils sees it (requests are pb_utils objects)."""

    def infer(self, request: Any) -> Any:
        """Run a BLS request; a pb_utils.InferenceResponse (with an error on failure)."""
        ...

    def stream(self, request: Any) -> Iterator[Any]:
        """Run a BLS request on a decoupled model; its responses, then the end (the last one
        may be an empty flag-only response, as Triton's iterator yields)."""
        ...

    def metric_family(self, name: str, description: str, kind: int) -> None: ...

    def metric_create(
        self, family: str, labels: dict[str, str], buckets: list[float] | None
    ) -> int: ...

    def metric_update(self, key: int, op: str, value: float) -> None: ...

    def metric_value(self, key: int) -> float: ...

    def log(self, level: int, message: str, where: tuple[str, int] | None = None) -> None:
        """A `pb_utils.Logger` line; `where`: the model's file and line that logged it."""
        ...

    def load_model(self, name: str, config: str, files: dict[str, bytes] | None) -> None: ...

    def unload_model(self, name: str, unload_dependents: bool) -> None: ...

    def is_model_ready(self, name: str, version: str) -> bool: ...


class InProcessHost:
    """The part of a ModelHost every host in the server's own process shares: custom metrics
    straight into `metrics` (a CustomMetrics), logs into the server's log."""

    metrics: CustomMetrics

    def metric_family(self, name: str, description: str, kind: int) -> None:
        self.metrics.family(name, description, kind)

    def metric_create(
        self, family: str, labels: dict[str, str], buckets: list[float] | None
    ) -> int:
        return self.metrics.create(family, labels, buckets)

    def metric_update(self, key: int, op: str, value: float) -> None:
        self.metrics.update(key, op, value)

    def metric_value(self, key: int) -> float:
        return self.metrics.value(key)

    def log(self, level: int, message: str, where: tuple[str, int] | None = None) -> None:
        log_model_line(level, message, where)


def log_model_line(level: int, message: str, where: tuple[str, int] | None) -> None:
    """A Python model's `pb_utils.Logger` line (`level`: pb_utils' LogLevel) in the server's
    log, its record naming the model's file and line (`where`), as Triton's does."""
    severity = LOG_LEVELS.get(level, logging.INFO)
    if not _model_log.isEnabledFor(severity):
        return
    if where is None:
        _model_log.log(severity, "%s", message)
        return
    file, line = where
    record = _model_log.makeRecord(
        _model_log.name, severity, str(file), int(line), "%s", (message,), None
    )
    _model_log.handle(record)
