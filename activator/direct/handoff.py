"""The activator's end of one replica's handoff socket: send client sockets, read load reports.

A replica started with `--handoff-socket PATH --handoff-state FILE` listens there
(thawwire.handoff_protocol is the protocol, shared with the runtime; the activator imports
nothing of the runtime). `HandoffLink.send` passes a client's TCP socket as one `sendmsg` of
its slot number plus the fd (SCM_RIGHTS); the replica then serves that connection directly,
and keeps the connection's state in the slot's byte of FILE, which both sides map. The
activator keeps its copy of the socket until the replica reports the connection ended, so
that if the replica dies, `replica_died` can still answer its clients (activator.direct.orphans).
The replica sends a `LoadReport` line every 100 ms while it has handed-off connections and
whenever some end; `sample(now)` turns the cumulative `busy_s` into the mean concurrency since
the previous sample, which the autoscaler adds to what it observes in the activator itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import mmap
import socket
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from activator.direct.orphans import Outcome, abort, bad_gateway, outcome, settle
from thawwire.errors import WireError
from thawwire.handoff_protocol import (
    DRAIN,
    MAX_REPORT_LINE_BYTES,
    SLOT_BYTES,
    SLOTS,
    LoadReport,
    SlotState,
    encode_slot,
)

__all__ = ["QUIET_S", "Fallback", "HandoffLink", "HandoffLinks", "SlotTable"]

logger = logging.getLogger(__name__)

QUIET_S = 1.0
"""How long a draining replica's direct connections must all be idle before it is stopped."""
QUIET_POLL_S = 0.02


class Fallback(Protocol):
    """Where the connections a replica does not end itself go (the front door)."""

    def take_back(self, conn: socket.socket) -> None:
        """Serve `conn` in the activator, from its next request on."""

    def count(self, model: str, outcome: Outcome) -> None:
        """One connection with this outcome (thaw_direct_fallbacks_total)."""


class SlotTable:
    """Connection slots of one replica's state file: round robin, never one still open."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.open: dict[int, _Handed] = {}
        self._next = 0

    def allocate(self) -> int | None:
        """A free slot, or None when every slot is open."""
        if len(self.open) >= self.size:
            return None
        while self._next in self.open:
            self._next = (self._next + 1) % self.size
        slot, self._next = self._next, (self._next + 1) % self.size
        return slot


@dataclass(slots=True)
class _Handed:
    conn: socket.socket  # our copy: open until the replica reports the connection ended
    fallback: Fallback


class HandoffLink:
    """One connected replica handoff socket, and the connections handed over it.

    The activator's copy of every handed-off socket stays open until the replica reports the
    connection ended (`closed`): a replica that dies does not close its clients' connections,
    and `replica_died` settles them from their state bytes (activator.direct.orphans). Connections
    the replica did not take (`returned`) go to the fallback unread.
    """

    def __init__(
        self,
        path: Path,
        replica_id: str,
        *,
        model: str = "",
        state_path: Path | None = None,
        slots: int = SLOTS,
    ) -> None:
        self.path = path
        self.replica_id = replica_id
        self.model = model
        self.connected = False
        self._report = LoadReport(0, 0.0, 0, time.monotonic())
        self._sampled_busy: float | None = None
        self._sampled_at = 0.0
        self._sock: socket.socket | None = None
        self._buffer = b""
        self._loop: asyncio.AbstractEventLoop | None = None
        if state_path is None:
            self._states = mmap.mmap(-1, slots)
        else:
            with open(state_path, "r+b") as file:  # the mapping outlives the file object
                self._states = mmap.mmap(file.fileno(), 0)
        self._slots = SlotTable(len(self._states))
        self._settling: set[asyncio.Task[None]] = set()
        self._died = False
        self._drain_sent = False
        # Set when the replica closed its end: it is exiting, has exited, or is broken;
        # usually noticed here before its exit is reaped.
        self.lost = asyncio.Event()

    @property
    def connections(self) -> int:
        """Open direct connections: handed off and not yet reported ended."""
        return len(self._slots.open)

    @property
    def in_flight(self) -> int:
        """Requests in flight on the open direct connections; none without one. The replica
        stops reporting when its last connection ends, and a client that hung up mid-request
        leaves the report that said so with the request still counted (its handler runs on):
        counted for good, it kept the model from ever scaling to zero. A request whose client
        is gone is not load (in-path, the activator stops counting it at the hang-up too)."""
        return self._report.in_flight if self._slots.open else 0

    async def connect(self, timeout_s: float) -> None:
        """Connect to the replica's socket (it exists once the replica is listening)."""
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + timeout_s
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                await loop.sock_connect(sock, str(self.path))
                break
            except (FileNotFoundError, ConnectionRefusedError):
                sock.close()
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.02)
            except BaseException:
                sock.close()
                raise
        self._sock, self._loop, self.connected = sock, loop, True
        loop.add_reader(sock.fileno(), self._read)

    def send(self, conn: socket.socket, fallback: Fallback) -> bool:
        """Pass `conn` to the replica. True: the link owns it now (until the replica reports
        it ended, or it goes to `fallback`). False: still the caller's."""
        if self._sock is None or not self.connected:
            return False
        slot = self._slots.allocate()
        if slot is None:
            logger.warning("replica %s: every connection slot is open", self.replica_id)
            return False
        self._states[slot] = SlotState.IDLE  # the replica writes it from here on
        try:
            sent = socket.send_fds(self._sock, [encode_slot(slot)], [conn.fileno()])
        except OSError as exc:  # replica gone, or its socket buffer full
            logger.warning("replica %s: connection handoff failed: %s", self.replica_id, exc)
            if not isinstance(exc, BlockingIOError):
                self._lost()
            return False
        if sent != SLOT_BYTES:  # cannot happen for 4 bytes; never leave the stream misframed
            self._lost()
            return False
        self._slots.open[slot] = _Handed(conn, fallback)
        logger.debug("replica %s: connection handed off (slot %d)", self.replica_id, slot)
        return True

    def _read(self) -> None:
        assert self._sock is not None  # the reader exists only while connected
        try:
            data = self._sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._lost()
            return
        self._take(data)

    def _take(self, data: bytes) -> None:
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        if len(self._buffer) > MAX_REPORT_LINE_BYTES:
            self._buffer = b""
        for line in lines:
            try:
                report = LoadReport.from_line(line)
            except WireError as exc:
                logger.warning("replica %s: bad load report %r: %s", self.replica_id,
                               line[:100], exc.message)  # fmt: skip
                continue
            self._report = report
            self._ended(report)

    def _ended(self, report: LoadReport) -> None:
        for slot in report.closed:
            handed = self._slots.open.pop(slot, None)
            if handed is not None:
                handed.conn.close()  # the replica shut it down: the client saw FIN
        for slot in report.returned:
            handed = self._slots.open.pop(slot, None)
            if handed is not None:
                handed.fallback.count(self.model, Outcome.RETURNED)
                handed.fallback.take_back(handed.conn)

    def sample(self, now: float) -> float:
        """Mean in-flight requests on direct connections since the previous call (0 first).

        The mean between the replica's last report before the previous call and its last one
        now: its exact time integral, read where it was measured. Extrapolating each report's
        in-flight count to `now` instead is off by whatever changed since the report, one tick
        too high, the next too low; at a load that is an exact multiple of the target, the
        high ticks scaled a model one replica above what the same load gets in-path.
        Without a report since the previous call, the count held since the last one."""
        report = self._report
        previous, since = self._sampled_busy, self._sampled_at
        self._sampled_busy, self._sampled_at = report.busy_s, report.t
        if previous is None:
            return 0.0
        if report.t <= since:
            return float(self.in_flight)
        return max(0.0, report.busy_s - previous) / (report.t - since)

    def busy(self) -> bool:
        """A request of a handed-off connection is reported in flight, or its state byte says
        it was begun or is being answered."""
        if self.in_flight:
            return True
        states = self._states
        return any(states[slot] != SlotState.IDLE for slot in self._slots.open)

    async def quiesce(
        self, timeout_s: float, *, quiet_s: float = QUIET_S, poll_s: float = QUIET_POLL_S
    ) -> None:
        """Tell the replica it is drained (`drain`), then wait, at most `timeout_s`, until no
        open connection has had a request for `quiet_s` (every poll saw each one idle), or
        none is open, or the replica is gone. Call it before stopping the replica: its
        keep-alive clients in the middle of a request leave at their next answer (`Connection:
        close`, they reconnect through the activator), whereas a replica stopped under them
        drops the request a client sent the instant before (a 502, or a reset connection)."""
        self.drain()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        quiet_since = loop.time()
        while self._slots.open and not self.lost.is_set():
            now = loop.time()
            if self.busy():
                quiet_since = now
            elif now - quiet_since >= quiet_s:
                return
            if now >= deadline:
                logger.info(
                    "replica %s: %d direct connection(s) still busy after %.1f s; stopping it",
                    self.replica_id, len(self._slots.open), timeout_s,
                )  # fmt: skip
                return
            await asyncio.sleep(min(poll_s, max(0.0, deadline - now)))

    def drain(self) -> None:
        """Ask the replica to end each handed-off connection at its next response (the
        protocol's `DRAIN` message), as its max age would later. Best effort: a replica gone
        or a full socket buffer leaves the max age to do it."""
        if self._sock is None or self._drain_sent:
            return
        try:
            sent = self._sock.send(encode_slot(DRAIN))
        except OSError as exc:
            logger.debug("replica %s: drain message not sent: %s", self.replica_id, exc)
            return
        if sent != SLOT_BYTES:  # 4 bytes into a socket buffer: all or nothing in practice
            self._lost()
            return
        self._drain_sent = True

    def _lost(self) -> None:
        """The replica closed its end (or broke the protocol): no more handoffs, reports."""
        self.stop_sending()
        if self._sock is not None:
            with contextlib.suppress(OSError):  # its last reports, if a send noticed first
                while data := self._sock.recv(65536):
                    self._take(data)
            if self._loop is not None:
                with contextlib.suppress(ValueError, OSError, RuntimeError):
                    self._loop.remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
        # What was in flight is gone with the link; do not extrapolate it further.
        self._report = LoadReport(0, self._report.busy_s, 0, self._report.t)
        self.lost.set()

    def stop_sending(self) -> None:
        """No more handoffs (the replica is being stopped); its reports are still read, so
        connections it ends while it drains are closed here too."""
        if self.connected:
            logger.debug("replica %s: no more handoffs", self.replica_id)
        self.connected = False

    def replica_died(self) -> Counter[Outcome]:
        """The replica process is gone: settle each connection it did not report ended, by
        its state byte (activator.direct.orphans). Idempotent; returns what happened to them."""
        outcomes: Counter[Outcome] = Counter()
        if self._died:
            return outcomes
        self._died = True
        self._lost()
        open_slots, self._slots.open = self._slots.open, {}
        response = bad_gateway(self.replica_id, self.model)
        for slot, handed in sorted(open_slots.items()):
            result = outcome(self._states[slot])
            outcomes[result] += 1
            handed.fallback.count(self.model, result)
            if result is Outcome.TAKEN_BACK:
                handed.fallback.take_back(handed.conn)
            elif result is Outcome.BAD_GATEWAY:
                self._settle(handed.conn, response)
            else:
                abort(handed.conn)
        self._states.close()
        return outcomes

    def _settle(self, conn: socket.socket, response: bytes) -> None:
        task = asyncio.get_running_loop().create_task(settle(conn, response))
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    async def close(self) -> None:
        """Wait for 502 answers still being settled (bounded by their linger)."""
        await asyncio.gather(*self._settling, return_exceptions=True)


@runtime_checkable
class HandoffLinks(Protocol):
    """A scaler backend that hands client connections to its replicas."""

    def handoff_link(self, replica_id: str) -> HandoffLink | None: ...
