"""Run Triton python_backend `model.py` files unchanged: in the server process, or one stub
process per instance (runtime.python.placement decides, runtime.python.stub_backend
runs the processes).

In-process, the model runs in its instance's worker thread (or on the event loop once proven
tiny: runtime.scheduling.inline_policy), through the same runner a stub process uses
(runtime.python.stub.model_runner), so both keep Triton's contract alike.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from google.protobuf import json_format

from runtime.backends.base import AsyncExecute, Backend, ExecTimings, LoadContext
from runtime.errors import (
    RepositoryError,
    ServingError,
)
from runtime.inference import InferRequest, InferResponse
from runtime.model_config import config_to_json
from runtime.python import pb_utils
from runtime.python.auto_complete import mentions_hook, run_hook
from runtime.python.model_io import (
    complete_early,
    execute_failure,
    model_args,
    model_parameters,
    output_types,
    pb_response_result,
    request_cancelled,
    request_flags,
    rescheduled,
)
from runtime.python.placement import PythonRuntime, execution_env_path, placement
from runtime.python.stub.model_runner import (
    ModelError,
    ModelRunner,
    close_open_senders,
    execute_failure_text,
    install_pb_utils,
)
from runtime.python.stub.protocol import SENDER_DROPPED, wants_reschedule
from tritonconfig.schema import mc

if TYPE_CHECKING:
    from runtime.python.stub_backend import StubPython

__all__ = ["PythonBackend", "auto_complete_config", "install_pb_utils"]

logger = logging.getLogger(__name__)


def auto_complete_config(
    config: mc.ModelConfig, model_file: Path, *, model_dir: Path | None = None
) -> mc.ModelConfig:
    """Call the model's optional `auto_complete_config` staticmethod and apply what it returns.
    It runs in a process of its own (runtime.python.auto_complete), as in Triton's stub: under
    the config's EXECUTION_ENV_PATH interpreter when it names one (`model_dir`, the model's
    directory, is `$$TRITON_MODEL_DIRECTORY`; by default the one above the version directory
    holding `model_file`). A model file that never names it is not imported here at all."""
    if not mentions_hook(model_file):
        return config
    completed = run_hook(
        config_to_json(config), model_file, config.name,
        execution_env=execution_env_path(config),
        model_dir=model_dir if model_dir is not None else model_file.parent.parent,
    )  # fmt: skip
    if completed is None:
        return config
    _check_scheduling_choice(config, completed)
    updated = mc.ModelConfig()
    try:
        json_format.ParseDict(completed, updated)
    except (json_format.ParseError, AttributeError, TypeError) as exc:
        raise RepositoryError(
            f"model '{config.name}': auto_complete_config returned an invalid config: {exc}"
        ) from exc
    return updated


def _check_scheduling_choice(config: mc.ModelConfig, completed: dict[str, Any]) -> None:
    """Triton's refusal of an `auto_complete_config` that sets another scheduler than the
    config's own (`dynamic_batching` beside a configured `sequence_batching`)."""
    given = config.WhichOneof("scheduling_choice")
    if given is None:
        return
    for choice in ("dynamic_batching", "sequence_batching", "ensemble_scheduling"):
        if choice != given and choice in completed:
            raise RepositoryError(
                f"Configuration specified scheduling_choice as '{given}', but "
                f"auto-complete-config function for model '{config.name}' tries to set "
                f"scheduling_choice as '{choice}'"
            )


# A non-decoupled request's answer when the model let go of its sender without a response.
_DROPPED = object()

# Calls that wait on the server (BLS) or send from other threads: such a model's execute must
# never run on the event loop (a BLS call from there would wait on the loop it blocks; under
# `thaw up` so would `is_model_ready`, which asks the front door).
_LOOP_UNSAFE = ("exec(", "get_response_sender", "load_model(", "unload_model(", "is_model_ready(")


class InProcessPython:
    """One instance of a Triton python model, in this process."""

    used_image = False  # a python model has no snapshot image
    execute_async = None  # runs in this process: a worker thread (or the loop) runs `execute`

    def __init__(self) -> None:
        # Python code holds the GIL: a worker thread gives the loop nothing back, so a model
        # proven tiny may run inline (runtime.scheduling.inline_policy), unless load() finds it
        # unsafe.
        self.gil_bound = True
        self.timings = ExecTimings()
        self._runner: ModelRunner | None = None
        self._name = ""
        self._version = ""
        self._instance_name = ""
        self._decoupled = False
        self._iterative = False  # sequence_batching { iterative_sequence }: may reschedule
        self._declared: dict[str, str] = {}

    def load(self, ctx: LoadContext) -> None:
        label = f"model '{ctx.model_name}' version {ctx.version}"
        self._name, self._version = ctx.model_name, ctx.version
        self._instance_name = ctx.instance_name or f"{ctx.model_name}_0_0"
        self._declared = output_types(ctx.config)
        self._decoupled = ctx.config.model_transaction_policy.decoupled
        self._iterative = ctx.config.sequence_batching.iterative_sequence
        model_file = ctx.model_file or ctx.version_dir / "model.py"
        runner = ModelRunner(model_file, decoupled=self._decoupled)
        try:
            runner.initialize(model_args(ctx))
        except ModelError as exc:
            raise RepositoryError(f"{label}: {exc.message}") from exc
        self._runner = runner
        try:
            source = model_file.read_text(errors="replace")
        except OSError:
            source = _LOOP_UNSAFE[0]
        self.gil_bound = not self._decoupled and not any(c in source for c in _LOOP_UNSAFE)

    def execute(self, requests: list[InferRequest]) -> list[InferResponse | ServingError]:
        runner = self._runner
        if runner is None:
            raise ServingError(f"model '{self._name}' is not loaded")
        t0 = time.perf_counter_ns()
        sent: list[Any] = [None] * len(requests)
        # Set when a non-decoupled request's sender is made: its answer (or its drop) is here.
        waits: dict[int, threading.Event] = {}
        pb_requests = [
            self._to_pb(request, index, sent, waits) for index, request in enumerate(requests)
        ]
        t1 = time.perf_counter_ns()
        try:
            responses = runner.execute(pb_requests)
        except ModelError as exc:
            t2 = time.perf_counter_ns()
            self.timings = ExecTimings(t1 - t0, t2 - t1, 0)
            logger.warning("model=%s execute failed: %s", self._name, exc.message)
            if self._decoupled:
                close_open_senders(
                    pb_requests, execute_failure_text(self._instance_name, exc.message)
                )
            else:  # answered with the error below: later sends raise, as in a stub
                for pb in pb_requests:
                    if pb._sender is not None:
                        pb._sender.close()
            error = execute_failure(self._instance_name, exc.message)
            # A request its sender already answered keeps that answer (Triton's first wins).
            return [
                error if sent[index] is None else self._result(request, sent[index])
                for index, request in enumerate(requests)
            ]
        t2 = time.perf_counter_ns()
        # Released with RESCHEDULE: no response now, the scheduler runs them again.
        again = {i for i, pb in enumerate(pb_requests) if wants_reschedule(pb)}
        if responses is None and not self._decoupled:
            # Triton: a non-decoupled execute may return None, every response going through
            # the requests' senders (before or after the return).
            responses = [None] * len(requests)
        if responses is None:  # decoupled: what it sends goes to each request's sink
            results: list[InferResponse | ServingError] = [
                InferResponse(self._name, self._version, [], id=r.id, flag_only=True)
                for r in requests
            ]
        else:
            if waits:
                # Responses its senders send after the return: wait for them, as the stub
                # does. The pb requests go first: a sender the model let go of must be able
                # to die, which is what ends its wait.
                late = [
                    event
                    for index, event in waits.items()
                    if sent[index] is None and responses[index] is None and index not in again
                ]
                del pb_requests
                for event in late:
                    event.wait()
                t2 = time.perf_counter_ns()  # the late responses are the model's time
            results = [
                self._result(request, response if response is not None else sent[index])
                for index, (request, response) in enumerate(zip(requests, responses, strict=True))
            ]
        for index in again:
            results[index] = self._rescheduled(requests[index])
        self.timings = ExecTimings(t1 - t0, t2 - t1, time.perf_counter_ns() - t2)
        return results

    def unload(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.finalize()

    def _result(self, request: InferRequest, response: Any) -> InferResponse | ServingError:
        if response is None:
            return ServingError(f"model '{self._name}' sent no response for a request")
        if response is _DROPPED:
            return ServingError(SENDER_DROPPED)
        return pb_response_result(self._name, self._version, request.id, response, self._declared)

    def _rescheduled(self, request: InferRequest) -> InferResponse | ServingError:
        """A request the model released with RESCHEDULE (runtime.python.model_io.rescheduled);
        a decoupled one that cannot be rescheduled has its stream ended with the error."""
        result = rescheduled(self._name, self._version, request, iterative=self._iterative)
        sink = request.response_sink
        if isinstance(result, ServingError) and self._decoupled and sink is not None:
            sink.send(result, final=True)
        return result

    def _to_pb(
        self, request: InferRequest, index: int, sent: list[Any], waits: dict[int, threading.Event]
    ) -> pb_utils.InferenceRequest:
        inputs = [pb_utils.Tensor(t.name, t.data) for t in request.inputs]
        pb = pb_utils.InferenceRequest(
            inputs=inputs,
            request_id=request.id or "",
            correlation_id=request.parameters.get("sequence_id", 0),
            requested_output_names=[o.name for o in request.requested_outputs],
            model_name=self._name,
            flags=request_flags(request),
        )
        pb._parameters = model_parameters(request)  # a client's, of any JSON kind: as sent
        if request.trace is not None and request.trace.sampled:  # its BLS calls: children
            pb._trace = pb_utils.InferenceTrace(request.trace)
        pb._make_sender = functools.partial(self._sender, request, index, sent, waits)
        pb._cancel_probe = functools.partial(request_cancelled, request)
        return pb

    def _sender(
        self, request: InferRequest, index: int, sent: list[Any], waits: dict[int, threading.Event]
    ) -> pb_utils.InferenceResponseSender:
        sink = request.response_sink
        if self._decoupled and sink is not None:
            return pb_utils.InferenceResponseSender(
                lambda response, flags: self._deliver(request, response, flags),
                decoupled=True,
                cancelled=functools.partial(request_cancelled, request),
            )

        answered = waits[index] = threading.Event()

        def keep(response: Any, flags: int) -> None:
            """The request's one response (pb_utils refuses a second): to its client now."""
            if response is None or sent[index] is not None:
                return
            sent[index] = response
            answered.set()
            completion = request.completion
            if completion is not None:
                result = self._result(request, response)
                with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                    completion.get_loop().call_soon_threadsafe(complete_early, request, result)

        def dropped() -> None:
            if sent[index] is None:
                sent[index] = _DROPPED
                answered.set()

        return pb_utils.InferenceResponseSender(
            keep,
            decoupled=False,
            cancelled=functools.partial(request_cancelled, request),
            abandoned=dropped,
        )

    def _deliver(self, request: InferRequest, response: Any, flags: int) -> None:
        """A decoupled send, from whichever model thread made it."""
        sink = request.response_sink
        if sink is None:
            return
        final = bool(flags & pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if response is None:
            sink.send(None, final=final)
            return
        sink.send(
            pb_response_result(self._name, self._version, request.id, response, self._declared),
            final=final,
        )


class PythonBackend:
    """A Python model instance, in this process or in a stub process (see the module doc)."""

    used_image = False

    def __init__(self) -> None:
        self._impl: Backend = InProcessPython()

    @property
    def gil_bound(self) -> bool:
        return self._impl.gil_bound

    @property
    def timings(self) -> ExecTimings:
        return self._impl.timings

    @property
    def execute_async(self) -> AsyncExecute | None:
        return self._impl.execute_async

    @property
    def stub(self) -> StubPython | None:
        """The instance's stub (None: it runs in this process)."""
        from runtime.python.stub_backend import StubPython

        return self._impl if isinstance(self._impl, StubPython) else None

    def load(self, ctx: LoadContext) -> None:
        if placement(ctx.config) == PythonRuntime.PROCESS:
            from runtime.python.stub_backend import StubPython

            self._impl = StubPython()
        self._impl.load(ctx)

    def execute(self, requests: list[InferRequest]) -> list[InferResponse | ServingError]:
        return self._impl.execute(requests)

    def unload(self) -> None:
        self._impl.unload()
