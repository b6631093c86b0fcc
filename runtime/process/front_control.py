"""The server's end of the native front's control socket (decision 0032, phase 2).

    StubPython ─relay(stub socket)─▶ FrontControl ─{"op":"relay"} + fds─▶ thaw-front
    HotModels  ─serve / retire────▶ FrontControl ─{"op":"serve"|"retire"}─▶ thaw-front
    stats read ─sync_stats()───────▶ FrontControl ─{"op":"stats"} ◀─ rows since the last ask

One AF_UNIX SOCK_SEQPACKET socket pair: the front inherits one end (`--control-fd`), this
server drives the other on its event loop. Each message is one datagram of JSON, descriptors in
SCM_RIGHTS; the front answers `retire` and `stats` with the same `seq`. A hot model's stub
socket goes to the front, which relays every message between the stub and the socket this
server keeps in its place, unchanged, except the answers to the executes the front sends
itself; so the stub, its wire and this server's handling of it stay as they are.
"""

from __future__ import annotations

import array
import asyncio
import json
import logging
import secrets
import socket
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric

from runtime.observe.stats import StatsBook
from runtime.python.stub.wire import channel_pair

__all__ = ["FrontCollector", "FrontControl"]

logger = logging.getLogger(__name__)

_REPLY_BYTES = 1 << 20  # a stats reply: one row per hot model version and batch size
_ANSWER_TIMEOUT_S = 10.0


class FrontControl:
    """This server's end of the control socket; use it on the server's event loop."""

    def __init__(self) -> None:
        self._sock, self.front_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.front_end.set_inheritable(True)
        self._sock.setblocking(False)
        # A secret only the front knows: what it posts to /thaw-front/outcome carries it.
        self.token = secrets.token_hex(16)
        self._seq = 0
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._instances: dict[tuple[str, str, str], int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.closed = False
        # The front's requests waiting behind the execute each stub runs, per (model, version),
        # as of the last statistics pull (`nv_inference_pending_request_count` adds them).
        self.pending: dict[tuple[str, str], int] = {}
        # Requests the front answered itself, per (model, version), since it started: its
        # successes (pulled with the statistics) and the failures this server answered for it.
        self.answered: dict[tuple[str, str], int] = {}
        self._pauses: set[str] = set()

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start reading the front's answers (once the front holds `front_end`)."""
        self._loop = loop
        self.front_end.close()
        loop.add_reader(self._sock.fileno(), self._readable)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._loop is not None:
            self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(ConnectionError("the native front is gone"))
        self._waiting.clear()

    # -- what the front is told ------------------------------------------------------------

    def relay(self, model: str, version: str, instance: str, stub: socket.socket) -> socket.socket:
        """Hand a stub's socket (the server's end) to the front; the socket to use in its
        place. The caller closes `stub` after."""
        index = self._instances.setdefault((model, version, instance), len(self._instances))
        mine, fronts = channel_pair()
        try:
            self._send(
                {"op": "relay", "model": model, "version": version, "instance": index,
                 "name": instance},
                [stub.fileno(), fronts.fileno()],
            )  # fmt: skip
        except BaseException:
            mine.close()
            raise
        finally:
            fronts.close()
        return mine

    def serve(self, row: dict[str, Any]) -> None:
        """Let the front answer a model version's infers (runtime.process.hot_models.hot_row)."""
        self._send({"op": "serve", **row, "token": self.token})

    def pause(self, reason: str, on: bool) -> None:
        """While any reason holds, the front forwards every infer: this server writes what
        it asks for (a trace, a verbose log line per request)."""
        before = bool(self._pauses)
        if on:
            self._pauses.add(reason)
        else:
            self._pauses.discard(reason)
        if bool(self._pauses) != before:
            self._send({"op": "pause", "value": bool(self._pauses)})

    async def retire(self, model: str, version: str) -> None:
        """Stop the front answering a version; return once its executes there are answered."""
        await self._ask({"op": "retire", "model": model, "version": version})

    async def retire_instance(self, model: str, version: str, instance: str) -> None:
        """Stop the front sending executes to one instance (its model is to be finalized; the
        version's other instances go on); return once those it sent there are answered."""
        index = self._instances.get((model, version, instance))
        if index is not None:
            await self._ask({"op": "retire", "model": model, "version": version, "instance": index})

    async def sync_stats(self, book: StatsBook) -> None:
        """Add what the front answered since the last call to the versions' statistics."""
        if self.closed:
            return
        try:
            reply = await self._ask({"op": "stats"})
        except (ConnectionError, TimeoutError) as exc:
            logger.warning("the native front's statistics are not in: %s", exc)
            return
        self.pending = {
            (str(model), str(version)): int(count)
            for model, version, count in reply.get("pending", ())
        }
        opened = dict(book.items())
        for row in reply.get("rows", ()):
            model, version, batch_size, successes, request_ns, queue_ns, *rest = row
            input_ns, infer_ns, output_ns, last_ms = rest
            key = (str(model), str(version))
            self.answered[key] = self.answered.get(key, 0) + int(successes)
            stats = opened.get(key)
            if stats is not None and successes:
                stats.record_summed(
                    int(batch_size), int(successes), int(request_ns), int(queue_ns),
                    (int(input_ns), int(infer_ns), int(output_ns)), int(last_ms),
                )  # fmt: skip

    def count_answered(self, model: str, version: str) -> None:
        """One more request the front took that this server answered for it (a failure)."""
        key = (model, version)
        self.answered[key] = self.answered.get(key, 0) + 1

    # -- the socket ----------------------------------------------------------------------------

    async def _ask(self, fields: dict[str, Any]) -> dict[str, Any]:
        if self._loop is None or self.closed:
            raise ConnectionError("the native front is gone")
        self._seq += 1
        seq = self._seq
        future = self._loop.create_future()
        self._waiting[seq] = future
        try:
            self._send({**fields, "seq": seq})
            return await asyncio.wait_for(asyncio.shield(future), _ANSWER_TIMEOUT_S)
        finally:
            self._waiting.pop(seq, None)

    def _send(self, fields: dict[str, Any], fds: list[int] | None = None) -> None:
        if self.closed:
            raise ConnectionError("the native front is gone")
        payload = json.dumps(fields, separators=(",", ":")).encode()
        ancillary = (
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())] if fds else []
        )
        try:
            self._sock.sendmsg([payload], ancillary)
        except BlockingIOError:
            # Control messages are few and small: a full buffer means the front is stuck.
            raise ConnectionError("the native front does not read its control socket") from None
        except OSError as exc:
            self.close()
            raise ConnectionError(f"the native front is gone: {exc}") from exc

    def _readable(self) -> None:
        while not self.closed:
            try:
                data = self._sock.recv(_REPLY_BYTES)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                self.close()
                return
            try:
                reply = json.loads(data)
                seq = int(reply["seq"])
            except (ValueError, KeyError, TypeError) as exc:
                logger.error("the native front sent a malformed control message: %r", exc)
                continue
            future = self._waiting.get(seq)
            if future is not None and not future.done():
                future.set_result(reply)


class FrontCollector:
    """The front on /metrics, read at scrape time (after the statistics pull the metrics page
    makes): `thaw_native_front_answered_total` by model and version, the infers the front took
    itself (its successes, and the failures this server answered for it). Beside Triton's
    `nv_inference_request_success` it says how much of a model's traffic takes the hot path;
    none for a hot model means the front forwards its requests (what it cannot check in full,
    tracing, a verbose log)."""

    def __init__(self, control: FrontControl) -> None:
        self._control = control

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        answered = CounterMetricFamily(
            "thaw_native_front_answered",
            "Infer requests the native front took itself (sent to the model's stub), by model "
            "and version",
            labels=["model", "version"],
        )
        for (model, version), count in sorted(self._control.answered.items()):
            answered.add_metric([model, version], count)
        yield answered
