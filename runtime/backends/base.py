"""The `Backend` Protocol every model backend implements, and the `LoadContext` it loads from."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from runtime.backends.snapshot_image import SnapshotImage
from runtime.errors import ServingError
from runtime.inference import InferRequest, InferResponse
from tritonconfig.schema import mc

__all__ = ["AsyncExecute", "Backend", "ExecTimings", "LoadContext", "SnapshotImage"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadContext:
    """Everything one backend instance needs to load one version of one model."""

    model_name: str
    version: str
    version_dir: Path
    model_dir: Path
    config: mc.ModelConfig
    instance_kind: str  # "KIND_CPU" | "KIND_GPU" (| "KIND_MODEL" for a python model)
    device_id: int
    image: SnapshotImage | None = None  # the restored snapshot image, when there is one
    instance_name: str = ""  # Triton's `<group>_<index>`, e.g. "add_sub_0_0"
    instance_count: int = 1  # instances of this model in total (thread budgeting)
    model_file: Path | None = None  # the model file (default_model_filename applied)
    # Where a backend reports that it runs differently than planned and still serves (a
    # failed CUDA graph capture, a TensorRT EP that did not start): (reason, message), logged
    # and counted in `thaw_device_fallbacks_total` by the loader. None: logged only.
    on_fallback: Callable[[str, str], None] | None = None
    # What the instances of one version share: one dict for all of them, which a backend may
    # fill as its first instance loads (the torch backend's ENABLE_WEIGHT_SHARING module).
    # Instances of a backend that loads them in parallel must not rely on it.
    shared: dict[str, Any] = field(default_factory=dict)

    def fallback(self, reason: str, message: str) -> None:
        """Report one fallback of this instance (see `on_fallback`)."""
        if self.on_fallback is not None:
            self.on_fallback(reason, message)
        else:
            logger.warning("model=%s %s", self.model_name, message)


@dataclass(slots=True)
class ExecTimings:
    """Nanoseconds a backend spent on the last `execute`: inputs, compute, outputs."""

    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0

    def add(self, t0: int, t1: int, t2: int, t3: int) -> None:
        """Add one request's phases from `perf_counter_ns` marks: inputs t0..t1, compute
        t1..t2, outputs t2..t3."""
        self.compute_input_ns += t1 - t0
        self.compute_infer_ns += t2 - t1
        self.compute_output_ns += t3 - t2


# An execute that is an I/O round trip (to a stub process), awaited on the event loop.
AsyncExecute = Callable[[list[InferRequest]], Awaitable[list[InferResponse | ServingError]]]


class Backend(Protocol):
    """One model instance; `execute` runs in that instance's worker thread only.

    `execute_async` is None for a backend that computes in this process; a backend whose
    execute is an I/O round trip (a Python model's stub process) gives it after `load`, and
    the scheduler then awaits it on the event loop instead of lending the instance a thread
    (runtime.scheduling.loop_instance): no thread hand-off on either side of the round trip.
    `execute` still works from any other thread (warm-up).

    `timings` is refreshed by every `execute` (the scheduler reads it right after, on the
    same thread, so it needs no lock). `gil_bound` (a class attribute) is True when `execute`
    holds the GIL throughout (pure Python): then the scheduler may run it on the event loop
    once it has proven tiny (runtime.scheduling.inline_policy). `used_image` is True once `load`
    built the model from `ctx.image` (its weights came from the snapshot, not the model files).
    """

    used_image: bool

    # Read-only here, so that a wrapper may forward them by property (PythonBackend).
    @property
    def gil_bound(self) -> bool: ...

    @property
    def timings(self) -> ExecTimings: ...

    @property
    def execute_async(self) -> AsyncExecute | None: ...

    def load(self, ctx: LoadContext) -> None: ...

    def execute(self, requests: list[InferRequest]) -> list[InferResponse | ServingError]: ...

    def unload(self) -> None: ...
