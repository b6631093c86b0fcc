"""The stub process of one Python model instance: `python -m runtime.python.stub.stub_main FD`.

    main thread: inbox.get(WORK) ─▶ init ─▶ ModelRunner.initialize ─▶ ready
                                 ─▶ execute ─▶ the model ─▶ done      ... finalize ─▶ exit
    any thread waiting (the main thread for work, a BLS call, a metrics call) reads the channel
    for everyone (runtime.python.stub.inbox): no reader thread, no hand-off per message

A response sender's sends, from any of the model's threads, go straight to the channel (a
non-decoupled request's too: Triton sends it at once); `is_cancelled()` asks the server, and
only when a model asks. When the server goes away the inbox sees the end of the stream and the
process exits; a stub busy in the model's code when that happens (a long `execute`) would only
see it after, so a watch thread exits it as soon as its server is gone (as Triton's stubs watch
their server's health): a SIGKILLed server leaves no stub behind.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from runtime.python import pb_utils
from runtime.python.stub.inbox import WORK, Inbox
from runtime.python.stub.model_runner import (
    ModelError,
    ModelRunner,
    close_open_senders,
    execute_failure_text,
)
from runtime.python.stub.protocol import (
    SENDER_DROPPED,
    pb_tensors,
    response_fields,
    split,
    wants_reschedule,
)
from runtime.python.stub.stub_host import StubHost
from runtime.python.stub.wire import Channel, ChannelClosed, Message
from thawserver.log_records import log_to_stderr

logger = logging.getLogger("runtime.python.stub")

PARENT_POLL_S = 0.5
"""How often the stub checks that the server that started it is still its parent."""


def exit_with_parent(poll_s: float = PARENT_POLL_S) -> threading.Thread:
    """Start a daemon thread that exits this process once its parent (the server) is gone."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        logger.warning("the server (pid %d) is gone: the stub exits", parent)
        os._exit(1)

    thread = threading.Thread(target=watch, name="thaw-stub-parent-watch", daemon=True)
    thread.start()
    return thread


class Stub:
    """One model instance served over one channel."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.inbox = Inbox(channel)
        self.host = StubHost(channel, self.inbox)
        self.runner: ModelRunner | None = None

    def serve(self) -> int:
        while True:
            message = self.inbox.get(WORK)
            if message is None:
                return 0  # the server is gone
            op = message.fields.get("op")
            if op == "init":
                self._init(message.fields)
            elif op == "execute":
                self._execute(message)
            elif op == "finalize":
                if self.runner is not None:
                    self.runner.finalize()
                self._send({"op": "finalized"})
                return 0

    def _send(self, fields: dict[str, Any], tensors: list[Any] | None = None) -> None:
        try:  # noqa: SIM105 (not contextlib.suppress: this runs for every answer, try is free)
            self.channel.send(Message(fields, tensors or []))
        except ChannelClosed:
            pass  # the server is gone: the inbox sees the end of the stream and the stub exits

    def _init(self, fields: dict[str, Any]) -> None:
        # As in Triton's stub, the model file is the module `model` of its process (Triton's
        # qa custom_metrics model runs `unittest.main("model")` inside execute, and
        # bls_model_loading inside initialize).
        runner = ModelRunner(
            Path(fields["model_file"]), decoupled=bool(fields["decoupled"]), alias="model"
        )
        try:
            runner.initialize(dict(fields["args"]))
        except ModelError as exc:
            self._send({"op": "failed", "error": exc.message})
            return
        self.runner = runner
        self._send({"op": "ready"})

    def _execute(self, message: Message) -> None:
        runner = self.runner
        exec_id = message.fields["id"]
        specs = message.fields["requests"]
        groups = split(message.tensors, [int(r["n"]) for r in specs])
        requests = [
            self._request(exec_id, i, spec, group)
            for i, (spec, group) in enumerate(zip(specs, groups, strict=True))
        ]
        if runner is None:
            self._send({"op": "done", "id": exec_id, "error": "the model is not initialized"})
            return
        try:
            responses = runner.execute(requests)
        except ModelError as exc:
            if runner.decoupled:
                close_open_senders(
                    requests, execute_failure_text(runner.instance_name, exc.message)
                )
            else:  # the server answers them with the error (those not answered yet)
                for request in requests:
                    if request._sender is not None:
                        request._sender.close()
            self._send({"op": "done", "id": exec_id, "error": exc.message})
            return
        rows: list[dict[str, Any]] = []
        tensors: list[Any] = []
        # Requests the model released with RESCHEDULE (read once it returned, as Triton's
        # python backend does): the server runs them again, no response for them now.
        again = [i for i, request in enumerate(requests) if wants_reschedule(request)]
        if not runner.decoupled:
            # Triton: a non-decoupled execute may return None (or None for a request), its
            # response sent through the request's sender, before or after the return.
            for index, request in enumerate(requests):
                response = responses[index] if responses is not None else None
                if again and index in again:
                    rows.append({"reschedule": True})
                elif response is not None:
                    fields, outs = response_fields(response)
                    rows.append(fields)
                    tensors.extend(outs)
                elif request._sender is None:
                    rows.append({"none": True})
                else:  # its response came through the sender, or will
                    rows.append({"sender": True})
        # Sent at once, never held for company: if the next execute kills the process, this
        # answer must already be with the server.
        done: dict[str, Any] = {"op": "done", "id": exec_id, "responses": rows}
        if again:
            done["reschedule"] = again
        self._send(done, tensors)

    def _request(self, exec_id: int, index: int, spec: dict[str, Any], group: list[Any]) -> Any:
        request = pb_utils.InferenceRequest(
            inputs=pb_tensors(group),
            request_id=spec.get("id") or "",
            correlation_id=spec.get("correlation_id", 0),
            requested_output_names=spec.get("outputs", []),
            model_name=spec.get("model", ""),
            flags=spec.get("flags", 0),
        )
        request._parameters = spec.get("params") or {}  # a client's, of any JSON kind: as sent
        if "trace" in spec:  # traced: a BLS call given `request.trace()` is its child
            request._trace = pb_utils.InferenceTrace(spec["trace"])
        runner = self.runner
        link = _RequestLink(self, exec_id, index, runner is not None and runner.decoupled)
        request._make_sender = link.make_sender
        request._cancel_probe = link.cancelled
        return request


class _RequestLink:
    """What a request handed to the model needs of its stub: its response sender (made only if
    the model asks for it) and `is_cancelled()`. One small object per request, rather than the
    closures it replaces: most models use neither."""

    __slots__ = ("decoupled", "exec_id", "index", "stub")

    def __init__(self, stub: Stub, exec_id: int, index: int, decoupled: bool) -> None:
        self.stub, self.exec_id, self.index, self.decoupled = stub, exec_id, index, decoupled

    def make_sender(self) -> Any:
        return pb_utils.InferenceResponseSender(
            self.deliver,
            decoupled=self.decoupled,
            cancelled=self.cancelled,
            abandoned=None if self.decoupled else self.abandoned,
        )

    def cancelled(self) -> bool:
        return self.stub.host.is_cancelled(self.exec_id, self.index)

    def deliver(self, response: Any, flags: int) -> None:
        """Each send goes to the server at once (Triton's ResponseSender::Send)."""
        final = bool(flags & pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        key = [self.exec_id, self.index]
        if response is None:
            if self.decoupled:  # a non-decoupled final after its response tells nothing new
                self.stub._send({"op": "send", "key": key, "final": final, "response": None})
            return
        fields, outs = response_fields(response)
        self.stub._send({"op": "send", "key": key, "final": final, "response": fields}, outs)

    def abandoned(self) -> None:
        # Called from the sender's __del__, which may run inside a garbage collection on a
        # thread that holds the channel's send lock: the send goes from a thread of its own
        # (a model bug's path, never the normal one).
        error = {"error": SENDER_DROPPED, "code": pb_utils.TritonError.INTERNAL}
        fields = {"op": "send", "key": [self.exec_id, self.index], "final": True, "response": error}
        threading.Thread(target=self.stub._send, args=(fields,), daemon=True).start()


def leave_stopping_to_the_server() -> None:
    """SIGINT and SIGTERM do not end a stub: its server does, after `finalize()` (a terminal's
    Ctrl-C, or a stop signalled to the whole process group, reaches the stubs too, and a stub
    that died of it would skip `finalize()`, print a traceback and be restarted by a server
    that is stopping). Triton's stubs skip both signals the same way. A handler, not SIG_IGN:
    programs a model starts get the default dispositions back at exec. A server that is gone
    is noticed by `exit_with_parent`; SIGKILL still ends a stub at once."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _skip)


def _skip(signum: int, frame: object) -> None:
    """A signal the server acts on (`leave_stopping_to_the_server`)."""


def import_ahead(modules: list[str]) -> None:
    """Import what a stub started ahead of its model was told to (`--import`), before it
    reads its first message: a module that cannot be imported is the model's to meet."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:
            logger.warning("could not import %s ahead of the model: %r", name, exc)


def main(argv: list[str]) -> int:
    args = argv[1:]
    modules: list[str] = []
    if len(args) == 3 and args[1] == "--import":
        modules, args = [m for m in args[2].split(",") if m], args[:1]
    if len(args) != 1 or not args[0].isdigit():
        print("usage: python -m runtime.python.stub.stub_main FD [--import M,...]", file=sys.stderr)
        return 2
    leave_stopping_to_the_server()
    log_to_stderr(os.environ.get("THAW_STUB_LOG_LEVEL", "INFO").upper())
    exit_with_parent()
    sock = socket.socket(fileno=int(args[0]))
    # The channel's fd is the stub's argument, not the model's: `unittest.main("model")` in a
    # model (Triton's qa custom_metrics) reads sys.argv, which Triton's embedded stub leaves
    # without arguments (nor the modules imported ahead).
    sys.argv[1:] = []
    import_ahead(modules)
    stub = Stub(Channel(sock))
    pb_utils.install_host(stub.host)
    status = stub.serve()
    sys.stdout.flush()
    # Model threads (daemon or not) must not keep a finalized instance alive.
    os._exit(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
