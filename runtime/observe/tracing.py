"""Triton's trace records (`--trace-config`, `/v2/trace/setting`): the requests a setting
samples, written as Triton 2.51's `triton` mode writes them.

    RequestTimes    the timestamps of one executed request (perf_counter_ns: CLOCK_MONOTONIC,
                    the steady clock Triton's records use)
    Trace           one request's trace: a frontend begins it when the request arrives
                    (`RequestTracer.begin`: sampled by the model's setting, or UNSAMPLED), adds
                    its own activities (HTTP_RECV_START, ..., HTTP_SEND_END; GRPC_*), the
                    execution adds its seven, and its end writes it; an ensemble's step and a
                    BLS call get a child of it (`child`: `parent_id`, sampled with its parent)
    RequestTracer   samples by each model's effective setting (thawwire.trace_settings: rate,
                    count, level), keeps the records, and writes them to the setting's file:
                    `<file>.<n>` every `log_frequency` traces (and when `count` is reached),
                    else the file itself when the setting is replaced and at shutdown
    VersionTrace    the tracer bound to one model version (what a scheduler holds): fills the
                    request's trace when it executes; a request no frontend began a trace for
                    (the OpenAI routes) is sampled there instead, without frontend activities

A record is Triton's: `{"id": N, "model_name": ..., "model_version": V[, "request_id": ...]
[, "parent_id": P]}` then one `{"id": N, "timestamps": [{"name": ACTIVITY, "ns": T}]}` per
activity, in time order: the frontend's (HTTP_RECV_START, HTTP_RECV_END, HTTP_SEND_START,
HTTP_SEND_END; GRPC_WAITREAD_START, GRPC_WAITREAD_END, GRPC_SEND_START, GRPC_SEND_END),
REQUEST_START, QUEUE_START, COMPUTE_START, COMPUTE_INPUT_END, COMPUTE_OUTPUT_START, COMPUTE_END,
REQUEST_END and INFER_RESPONSE_COMPLETE (an ensemble's own record has no COMPUTE_*: its steps'
child records do). At the TENSORS level, `{"id": N, "activity": "TENSOR_QUEUE_INPUT", "tensor":
{...}}` per input and TENSOR_BACKEND_OUTPUT per output (alone: those records only). Each setting
counts its own samples, as a Triton TraceSetting object does: a change to a setting starts its
counts again. The files are the operator's only.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from runtime.inference import InferRequest, InferTensor, RequestTrace
from thawwire.trace_settings import TraceSetting, TraceSettings

__all__ = [
    "UNSAMPLED",
    "RequestTimes",
    "RequestTracer",
    "Trace",
    "VersionTrace",
    "frontend_trace",
]

logger = logging.getLogger(__name__)

# The trace levels that record: activities' timestamps, and tensors' values.
_LEVELS = frozenset({"TIMESTAMPS", "TENSORS"})
# Traces a setting keeps in memory before it appends them to its file (Triton keeps them all
# until shutdown when `log_frequency` is 0; a long run would grow without bound).
_MAX_BUFFERED = 1000


@dataclass(frozen=True, slots=True)
class RequestTimes:
    """One executed request's timestamps, in ns of the monotonic clock."""

    received_ns: int
    enqueued_ns: int
    compute_start_ns: int
    input_end_ns: int
    output_start_ns: int
    compute_end_ns: int
    request_end_ns: int

    def activities(self) -> tuple[tuple[str, int], ...]:
        return (
            ("REQUEST_START", self.received_ns),
            ("QUEUE_START", self.enqueued_ns),
            ("COMPUTE_START", self.compute_start_ns),
            ("COMPUTE_INPUT_END", self.input_end_ns),
            ("COMPUTE_OUTPUT_START", self.output_start_ns),
            ("COMPUTE_END", self.compute_end_ns),
            ("REQUEST_END", self.request_end_ns),
        )


class _TraceFile:
    """One trace file: traces appended to `[...]` in the file itself, or whole to `<file>.<n>`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._opened = False
        self._index = 0

    def append(self, traces: list[str]) -> None:
        if not traces:
            return
        try:
            # The first write starts the file afresh, as Triton's does.
            with Path(self.name).open("a" if self._opened else "w") as out:
                out.write(("," if self._opened else "[") + ",".join(traces))
            self._opened = True
        except OSError as exc:
            logger.error("failed writing trace file %s: %s", self.name, exc)

    def indexed(self, traces: list[str]) -> None:
        name = f"{self.name}.{self._index}"
        self._index += 1
        try:
            Path(name).write_text("[" + ",".join(traces) + "]")
        except OSError as exc:
            logger.error("failed writing trace file %s: %s", name, exc)

    def close(self) -> None:
        if self._opened:
            try:
                with Path(self.name).open("a") as out:
                    out.write("]")
            except OSError as exc:
                logger.error("failed closing trace file %s: %s", self.name, exc)
            self._opened = False


class _Sampler:
    """The counts and kept records of one effective setting (Triton's TraceSetting object)."""

    def __init__(self, setting: TraceSetting, file: _TraceFile | None) -> None:
        self.setting = setting
        self.file = file
        self._count = setting.count  # traces left to take; -1: no limit
        self._sampled = 0  # every request seen
        self._collected = 0  # traces taken
        self._buffer: list[str] = []

    def sample(self) -> bool:
        s = self.setting
        if self.file is None or not s.level & _LEVELS or s.rate == 0 or self._count == 0:
            return False
        self._sampled += 1
        if self._sampled % s.rate != 0:
            return False
        if self._count > 0:
            self._count -= 1
        return True

    def add(self, trace: str, *, counted: bool = True) -> None:
        """Keep a record; `counted` False: a child trace, which its parent's sample covers."""
        assert self.file is not None  # sampled
        self._buffer.append(trace)
        if counted:
            self._collected += 1
        frequency = self.setting.log_frequency
        done = self._count == 0 and self._collected == self._sampled
        if done or (frequency and len(self._buffer) >= frequency):
            self.file.indexed(self._buffer)
            self._buffer = []
        elif not frequency and len(self._buffer) >= _MAX_BUFFERED:
            self.file.append(self._buffer)
            self._buffer = []

    def flush(self) -> None:
        """Write what is kept (the setting is replaced, or the server stops)."""
        if self._buffer and self.file is not None:
            if self.setting.log_frequency:
                self.file.indexed(self._buffer)
            else:
                self.file.append(self._buffer)
        self._buffer = []


class RequestTracer:
    """Samples executed requests by the server's trace settings and writes their records."""

    def __init__(self, settings: TraceSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()  # records come from worker threads and the loop
        self._ids = itertools.count(1)
        self._files: dict[str, _TraceFile] = {}
        self._samplers: dict[str | None, _Sampler] = {}  # by model with its own setting; None
        # Each model's sampler as of a settings generation: the hot path's one lookup.
        self._by_model: dict[str, tuple[int, _Sampler]] = {}
        self._closed = False
        # The sampled traces of requests still running, by id: a stub's BLS call names its
        # request's trace by id (runtime.python.stub_services).
        self._live: weakref.WeakValueDictionary[int, Trace] = weakref.WeakValueDictionary()

    def version(self, model: str, version: str) -> VersionTrace:
        return VersionTrace(self, model, version)

    def begin(self, model: str, request_id: str = "") -> Trace:
        """A frontend received a request for `model`: count it against the model's setting;
        its Trace when sampled, else UNSAMPLED (as Triton samples at the frontend)."""
        with self._lock:
            sampler = self._current(model)
            if not sampler.sample():
                return UNSAMPLED
            trace = Trace(self, sampler, next(self._ids), model, request_id)
            self._live[trace.id] = trace
            return trace

    def live(self, trace_id: object) -> Trace | None:
        """The sampled trace `trace_id` of a request still running (None: not one)."""
        if type(trace_id) is not int:
            return None
        with self._lock:
            return self._live.get(trace_id)

    def record(
        self,
        model: str,
        version: str,
        request: InferRequest,
        times: RequestTimes,
        outputs: list[InferTensor],
    ) -> None:
        """Count one executed request no frontend began a trace for; keep its record when
        sampled."""
        trace = self.begin(model, request.id or "")
        if trace.sampled:
            _executed(trace, version, request, times, outputs)
            trace.end()

    def _child(self, parent: Trace, model: str, request_id: str) -> Trace:
        with self._lock:
            trace = Trace(
                self, parent.sampler, next(self._ids), model, request_id, parent_id=parent.id
            )
            self._live[trace.id] = trace
        return trace

    def _write(self, trace: Trace) -> None:
        sampler = trace.sampler
        assert sampler is not None  # a sampled trace's
        with self._lock:
            self._live.pop(trace.id, None)
            if self._closed:
                return  # the server stopped: its files are complete
            sampler.add(_record(trace), counted=trace.parent_id is None)
            if all(sampler is not current for current in self._samplers.values()):
                sampler.flush()  # its setting was replaced while the request ran

    def _current(self, model: str) -> _Sampler:
        """The model's sampler as of the settings' generation (the hot path's one lookup)."""
        generation = self.settings.generation
        cached = self._by_model.get(model)
        if cached is not None and cached[0] == generation:
            return cached[1]
        sampler = self._sampler(model)
        self._by_model[model] = (generation, sampler)
        return sampler

    def close(self) -> None:
        """Write every kept record and close the files (the server stops)."""
        with self._lock:
            self._closed = True
            for sampler in self._samplers.values():
                sampler.flush()
            self._samplers.clear()
            self._by_model.clear()
            for file in self._files.values():
                file.close()

    def _sampler(self, model: str) -> _Sampler:
        scope = model if self.settings.has_own(model) else None
        setting = self.settings.setting(model)
        sampler = self._samplers.get(scope)
        if sampler is None or sampler.setting != setting:
            if sampler is not None:
                sampler.flush()  # Triton writes a replaced setting's traces
            sampler = _Sampler(setting, self._file(setting.file))
            self._samplers[scope] = sampler
        return sampler

    def _file(self, name: str) -> _TraceFile | None:
        if not name:
            return None
        if name not in self._files:
            self._files[name] = _TraceFile(name)
        return self._files[name]


class Trace:
    """One request's trace (runtime.inference.RequestTrace); UNSAMPLED records nothing. Its
    activities come from one flow at a time (the frontend, then the execution, then the
    frontend again), so only its end takes the tracer's lock."""

    __slots__ = ("__weakref__", "_activities", "_ended", "_tensors", "_tracer", "id", "model",
                 "parent_id", "request_id", "sampled", "sampler", "version")  # fmt: skip

    def __init__(
        self,
        tracer: RequestTracer | None,
        sampler: _Sampler | None,
        trace_id: int,
        model: str,
        request_id: str,
        *,
        parent_id: int | None = None,
    ) -> None:
        self._tracer = tracer
        self.sampler = sampler
        self.sampled = tracer is not None
        self.id = trace_id
        self.model = model
        self.version = ""  # set when it executes
        self.request_id = request_id
        self.parent_id = parent_id
        self._activities: list[tuple[str, int]] = []
        self._tensors: list[str] = []  # TENSORS: each tensor's record
        self._ended = False

    def add(self, activity: str, ns: int) -> None:
        if self.sampled:
            self._activities.append((activity, ns))

    def executed(self, version: str, activities: tuple[tuple[str, int], ...]) -> None:
        """Its model version ran it: that version, and its seven activities."""
        if self.sampled:
            self.version = version
            self._activities += activities

    def tensors(self, activity: str, tensors: list[InferTensor]) -> None:
        """At the TENSORS level, `tensors`' values under `activity` (TENSOR_QUEUE_INPUT: a
        request's inputs as queued; TENSOR_BACKEND_OUTPUT: what the model answered)."""
        if self.sampled and self.sampler is not None and "TENSORS" in self.sampler.setting.level:
            self._tensors += (_tensor_record(self.id, activity, t) for t in tensors)

    def child(self, model: str, request_id: str) -> Trace:
        """The trace of an ensemble step or BLS call this request makes (sampled with it)."""
        if self._tracer is None:
            return self
        return self._tracer._child(self, model, request_id)

    def end(self) -> None:
        """Write it (once)."""
        if self._tracer is None or self._ended:
            return
        self._ended = True
        self._tracer._write(self)


UNSAMPLED = Trace(None, None, 0, "", "")
"""The trace of a request its setting did not sample, and of every step or call it makes."""


def _record(trace: Trace) -> str:
    assert trace.sampler is not None  # a sampled trace's
    if "TIMESTAMPS" not in trace.sampler.setting.level:
        return ",".join(trace._tensors)  # Triton's TENSORS alone: no head, no timestamps
    trace_id = trace.id
    head: dict[str, object] = {"id": trace_id, "model_name": trace.model}
    version = trace.version
    head["model_version"] = int(version) if version.isdigit() else (version or -1)
    if trace.request_id:
        head["request_id"] = trace.request_id
    if trace.parent_id is not None:
        head["parent_id"] = trace.parent_id
    parts = [json.dumps(head, separators=(",", ":"))]
    parts += [
        json.dumps(
            {"id": trace_id, "timestamps": [{"name": name, "ns": ns}]}, separators=(",", ":")
        )
        for name, ns in sorted(trace._activities, key=lambda activity: activity[1])
    ]
    return ",".join(parts + trace._tensors)


def _tensor_record(trace_id: int, activity: str, tensor: InferTensor) -> str:
    """Triton's record of one tensor: its values as text, comma-separated (numbers as C++'s
    stream writes them, 6 significant digits; BOOL as 1 and 0; each BYTES element in
    quotes; none for FP16 and BF16, as Triton), its shape as "d0,d1"."""
    shape = ",".join(str(d) for d in tensor.shape)
    record = {"name": tensor.name, "data": _values(tensor), "shape": shape,
              "dtype": tensor.datatype}  # fmt: skip
    return json.dumps(
        {"id": trace_id, "activity": activity, "tensor": record}, separators=(",", ":")
    )


def _values(tensor: InferTensor) -> str:
    kind = tensor.datatype
    if kind in ("FP16", "BF16"):
        return ""
    flat = np.asarray(tensor.data).reshape(-1)
    if kind == "BYTES":
        items = (v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in flat)
        return ",".join(f'"{v}"' for v in items)
    if kind in ("FP32", "FP64"):
        return ",".join(f"{v:g}" for v in flat.tolist())
    if kind == "BOOL":
        return ",".join("1" if v else "0" for v in flat.tolist())
    return ",".join(str(v) for v in flat.tolist())


def frontend_trace(
    tracer: RequestTracer | None, request: InferRequest, arrived: tuple[str, int], read: str
) -> Trace | None:
    """The trace a frontend begins for a decoded `request` (set on it): the activity of its
    arrival (`arrived`: name and time) and `read`, its message read, now; None when no setting
    traces at all (the hot path's one check)."""
    if tracer is None or not tracer.settings.maybe_tracing:
        return None
    trace = request.trace = tracer.begin(request.model_name, request.id or "")
    trace.add(*arrived)
    trace.add(read, time.perf_counter_ns())
    return trace


@dataclass(frozen=True, slots=True)
class VersionTrace:
    """The tracer bound to one model version."""

    tracer: RequestTracer
    model: str
    version: str

    @property
    def active(self) -> bool:
        """Whether any setting may trace now (else a request need not be described at all)."""
        return self.tracer.settings.maybe_tracing

    def executed(
        self, request: InferRequest, times: RequestTimes, outputs: list[InferTensor]
    ) -> None:
        """A request of this version executed (answering `outputs`): its trace filled in;
        sampled here when no frontend began one."""
        if request.trace is None:
            self.tracer.record(self.model, self.version, request, times, outputs)
        else:
            _executed(request.trace, self.version, request, times, outputs)


def _executed(
    trace: RequestTrace,
    version: str,
    request: InferRequest,
    times: RequestTimes,
    outputs: list[InferTensor],
) -> None:
    trace.executed(version, times.activities())
    trace.tensors("TENSOR_QUEUE_INPUT", request.inputs)
    if request.requested_outputs:  # a backend's response holds the requested outputs only
        wanted = {output.name for output in request.requested_outputs}
        outputs = [tensor for tensor in outputs if tensor.name in wanted]
    trace.tensors("TENSOR_BACKEND_OUTPUT", outputs)
