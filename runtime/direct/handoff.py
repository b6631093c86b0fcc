"""Take the client connections `thaw up` hands over a Unix socket, and report their load.

`thaw up` takes itself out of the data path of a warm model: it accepts a client's TCP
connection, peeks at its first request line and passes the socket's file descriptor to a
replica (SCM_RIGHTS). thawwire.handoff_protocol is the wire protocol (slot messages, state
bytes, load reports); this side listens (mode 0600), takes each message's socket, and reports
`received` right after each batch of messages (before any byte of those connections is read),
`closed` as soon as connections end here (coalesced per loop iteration), every
`REPORT_PERIOD_S` while any handed-off connection is open, and once when the last one closes.
The `DRAIN` message (no connection) tells it that it is being drained: runtime.direct.routing
ends each connection at its next response.

The activator keeps its own copy of every handed-off socket until it is reported `closed`,
so a replica that dies does not end its clients' connections: the activator answers them
from the state byte this replica keeps per connection in a file both map (`--handoff-state`;
runtime.direct.state). Because that copy keeps the connection open, this side shuts every
connection down explicitly when it ends here (client gone, `Connection: close`, keep-alive
timeout, drain).

A handed-off connection is served by a handler of the server's own `web.Server` (graceful
shutdown drains it like any other), wrapped in runtime.direct.protocol; its requests are
routed by runtime.direct.routing (this replica's models here, the rest to the front door).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path

from runtime.direct.protocol import DirectProtocol
from runtime.direct.routing import DirectRouting
from runtime.direct.state import ConnectionStates, DirectConnection
from thawwire.handoff_protocol import DRAIN, MAX_SLOTS_PER_REPORT, SLOT_BYTES, decode_slot

__all__ = ["REPORT_PERIOD_S", "HandoffReceiver"]

logger = logging.getLogger(__name__)

REPORT_PERIOD_S = 0.1
_MAX_FDS = 4  # receive room for more than one fd, so that extra ones are seen (and closed)


class HandoffReceiver:
    """Listens on `path`; serves the connections it receives with handlers `server` makes
    (a `web.Server` whose app `routing` is installed in), and reports their load."""

    def __init__(
        self,
        path: Path,
        server: Callable[[], asyncio.Protocol],
        routing: DirectRouting,
        *,
        states: ConnectionStates | None = None,
        accepting: Callable[[], bool] = lambda: True,
        wrap: Callable[[asyncio.Protocol], asyncio.Protocol] = lambda protocol: protocol,
    ) -> None:
        self.path = path
        self._server = server
        self._routing = routing
        self.states = states if states is not None else ConnectionStates(None)
        self._accepting = accepting
        self._wrap = wrap  # e.g. a ConnectionGuard's: deadlines for each connection
        self._clock = routing.clock
        self.load = routing.load
        self._received = 0  # handoff messages taken, acknowledged in every report
        self._closed: list[int] = []  # slots ended here, for the next report
        self._returned: list[int] = []  # slots not taken, for the next report
        self._direct: dict[DirectProtocol, DirectConnection] = {}
        self._listener: socket.socket | None = None
        self._links: set[socket.socket] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._report_timer: asyncio.TimerHandle | None = None
        self._report_soon: asyncio.Handle | None = None
        self._loop = asyncio.get_running_loop()

    # ---- the Unix socket: listen, accept the activator, receive fds ---------------------

    def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # a stale socket of a killed predecessor
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)  # the socket file is created 0600: only our user connects
        try:
            listener.bind(str(self.path))
        finally:
            os.umask(old_umask)
        os.chmod(self.path, 0o600)
        listener.listen(8)
        listener.setblocking(False)
        self._listener = listener
        self._loop.add_reader(listener.fileno(), self._accept_links)
        logger.info("accepting handed-off connections on %s", self.path)

    def _accept_links(self) -> None:
        assert self._listener is not None  # the reader exists only while listening
        while True:
            try:
                link, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                logger.warning("handoff socket accept failed: %s", exc)
                return
            link.setblocking(False)
            self._links.add(link)
            self._loop.add_reader(link.fileno(), self._receive, link)

    def _drop_link(self, link: socket.socket) -> None:
        if link in self._links:
            self._links.discard(link)
            with contextlib.suppress(ValueError, OSError):
                self._loop.remove_reader(link.fileno())
            link.close()

    def _receive(self, link: socket.socket) -> None:
        """Take every message waiting on `link`, acknowledge them, then serve the sockets.

        The acknowledgement (a load report whose `received` counts the messages) is written
        before any byte of the new connections is read: a connection the activator has no
        acknowledgement for was never touched here, so the activator may serve it itself
        when this link goes away.
        """
        conns: list[tuple[int, socket.socket]] = []
        alive = True
        while alive:
            try:
                data, fds, flags, _ = socket.recv_fds(link, SLOT_BYTES, _MAX_FDS)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                logger.warning("handoff socket read failed: %s", exc)
                data, fds, flags, alive = b"", [], 0, False
            if not data and not fds:
                alive = False  # the activator went away (or closed this link)
                break
            slot = decode_slot(data)
            if slot == DRAIN and not fds:  # no connection: this replica is being drained
                self._routing.drain()
                continue
            self._received += 1
            slot = -1 if slot is None else slot  # -1: misframed, never a slot
            conn = self._message_socket(slot, fds, flags)
            if conn is not None:
                conns.append((slot, conn))
            elif 0 <= slot < self.states.size:
                self._returned.append(slot)  # the activator still has it: it serves it
            else:  # a misframed stream: nothing after this can be trusted
                logger.warning("handoff message of %d bytes; dropping the link", len(data))
                alive = False
        if not alive:
            # The activator is gone (or broke the framing): it serves what it handed over
            # and we never acknowledged; our copies are closed, the connections stay open.
            for _, conn in conns:
                conn.close()
            self._drop_link(link)
            return
        if conns and not self._accepting():
            for slot, conn in conns:  # shutting down: returned unread
                self._returned.append(slot)
                conn.close()
            conns = []
        if not self._send_report(link):
            for _, conn in conns:  # not acknowledged: still the activator's, unread
                conn.close()
            return
        for slot, conn in conns:
            self._adopt(slot, conn)

    def _message_socket(self, slot: int, fds: list[int], flags: int) -> socket.socket | None:
        """The message's TCP socket; anything else is closed (and logged)."""
        if flags & socket.MSG_CTRUNC or len(fds) != 1 or not 0 <= slot < self.states.size:
            logger.warning("handoff message with %d fds, slot %d: closed", len(fds), slot)
            for fd in fds:
                os.close(fd)
            return None
        return _tcp_socket(fds[0])

    def _adopt(self, slot: int, conn: socket.socket) -> None:
        conn.setblocking(False)
        # Our own descriptor of the connection: the transport's is gone by the time it
        # reports the connection lost, and the shutdown must still reach the client.
        direct = DirectConnection(slot, conn.dup(), self._clock(), self.states)
        task = self._loop.create_task(self._serve(direct, conn))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, direct: DirectConnection, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(
                lambda: self._wrap(self._protocol(direct)), sock=conn
            )
        except OSError as exc:
            logger.debug("handed-off connection could not be served: %s", exc)
            conn.close()
            if direct.handler is None:
                self._end(direct)

    # ---- one handed-off connection -----------------------------------------------------

    def _protocol(self, direct: DirectConnection) -> DirectProtocol:
        """A handler of the server's own kind, wrapped so that it follows `direct`."""
        protocol = DirectProtocol(
            self._server(), direct, on_open=self._routing.track, on_lost=self._connection_lost
        )
        self._direct[protocol] = direct
        self.load.connections += 1
        self._schedule_report()
        return protocol

    def _connection_lost(self, protocol: DirectProtocol) -> None:
        direct = self._direct.pop(protocol, None)
        if direct is None:
            return
        self._routing.forget(protocol.transport)
        self.load.connections -= 1
        if not self._accepting() and direct.unanswered:
            # Stopping with a request unanswered (the drain ran out): the connection stays
            # open in the activator, which answers it 502 once this process has exited.
            direct.end(shut_down=False)
            return
        self._end(direct)

    def _end(self, direct: DirectConnection) -> None:
        """The connection ended here: the client sees FIN now and the activator is told."""
        direct.end(shut_down=True)
        self._closed.append(direct.slot)
        if self._report_soon is None:  # one report for every close of this loop iteration
            self._report_soon = self._loop.call_soon(self._report)

    # ---- load reports --------------------------------------------------------------------

    def _schedule_report(self) -> None:
        if self._report_timer is None:
            self._report_timer = self._loop.call_later(REPORT_PERIOD_S, self._periodic_report)

    def _periodic_report(self) -> None:
        self._report_timer = None
        self._report()
        if self.load.connections > 0:
            self._schedule_report()

    def _report(self) -> None:
        self._report_soon = None
        for link in list(self._links):
            self._send_report(link)
        self._closed, self._returned = [], []  # no link: nobody is left to tell

    def _send_report(self, link: socket.socket) -> bool:
        """Write the pending report line(s) to `link`; one that cannot take them whole is
        dropped (False)."""
        now, closed, returned = self._clock(), self._closed, self._returned
        self._closed, self._returned = [], []
        n = MAX_SLOTS_PER_REPORT
        while True:
            line = self.load.report(now, self._received, closed=closed[:n], returned=returned[:n])
            if not self._send(link, line):
                return False
            closed, returned = closed[n:], returned[n:]
            if not closed and not returned:
                return True

    def _send(self, link: socket.socket, line: bytes) -> bool:
        """Write one report line; a link that cannot take it whole is dropped (False)."""
        try:
            if link.send(line) == len(line):
                return True
        except OSError:
            pass
        # Short or failed: the line framing (and an acknowledgement in it) is lost.
        logger.warning("handoff socket cannot take load reports; dropping it")
        self._drop_link(link)
        return False

    async def close(self) -> None:
        """Stop receiving connections and tell the activator which ones ended. Call it after
        the server drained (the handed-off connections are its own); the front door client
        (which they may still use) is the caller's to close after that."""
        if self._listener is not None:
            with contextlib.suppress(ValueError, OSError):
                self._loop.remove_reader(self._listener.fileno())
            self._listener.close()
            self._listener = None
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.sleep(0)  # transports closed by the drain report their loss now
        for protocol in list(self._direct):  # still open: ended here all the same
            self._connection_lost(protocol)
        if self._report_timer is not None:
            self._report_timer.cancel()
            self._report_timer = None
        if self._report_soon is not None:
            self._report_soon.cancel()
        self._report()  # the last word: every connection ended
        for link in list(self._links):
            self._drop_link(link)


def _tcp_socket(fd: int) -> socket.socket | None:
    """`fd` as a socket object when it is a TCP socket; otherwise it is closed (and logged)."""
    try:
        conn = socket.socket(fileno=fd)
    except OSError as exc:
        os.close(fd)
        logger.warning("handed-off fd is not a socket (%s); closed", exc)
        return None
    if conn.type != socket.SOCK_STREAM or conn.family not in (socket.AF_INET, socket.AF_INET6):
        logger.warning("handed-off socket is not TCP (%r, %r); closed", conn.family, conn.type)
        conn.close()
        return None
    return conn
