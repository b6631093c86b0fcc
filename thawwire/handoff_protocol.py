"""The protocol between `thaw up` and a replica process it starts: the listening line, the
connection handoff over a Unix socket, each connection's state byte, and the load reports.

- Start: the replica prints one line `THAW_LISTENING http://HOST:PORT` on stdout once it
  accepts connections (`listening_line`, `listening_url`). Its other listeners are announced
  just before, one line each (`THAW_LISTENING_GRPC HOST:PORT`, `THAW_LISTENING_METRICS
  http://HOST:PORT`: `surface_line`, `surface_address`), so a reader that has the HTTP line
  already has every address; a process serving no HTTP prints only the others.
- activator -> replica, on the socket the replica listens on (`--handoff-socket`): one
  `sendmsg` per client connection, `SLOT_BYTES` data bytes (the connection's slot, big-endian,
  `encode_slot`) plus exactly one fd (SCM_RIGHTS). A message with no fd, several fds or not a
  TCP socket is closed by the replica and its slot returned. One message carries no
  connection: `DRAIN` (that value, no fd) says the replica is being drained: each handed-off
  connection's next response carries `Connection: close`, so its client reconnects through
  the activator now rather than at the connection's max age.
- Each slot has one state byte in a file both map (`--handoff-state`, `SLOTS` bytes unless the
  activator made it otherwise): `SlotState`, written by the replica, read by the activator when
  the replica dies.
- replica -> activator, on the same socket: `LoadReport` lines (`to_line`, `from_line`), right
  after each batch of handoff messages (before any byte of those connections is read:
  `received`, the count of messages taken, acknowledges them), as soon as connections close,
  every 100 ms while any handed-off connection is open, and once when the last one closes.
  At most `MAX_SLOTS_PER_REPORT` slots per list (more go in further lines), so a line is at
  most a few KB; a reader drops anything past `MAX_REPORT_LINE_BYTES`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Any

from thawwire.errors import WireError

__all__ = [
    "DRAIN",
    "LISTENING_PREFIX",
    "MAX_REPORT_LINE_BYTES",
    "MAX_SLOTS_PER_REPORT",
    "SLOTS",
    "SLOT_BYTES",
    "LoadReport",
    "SlotState",
    "Surface",
    "decode_slot",
    "encode_slot",
    "listening_line",
    "listening_url",
    "surface_address",
    "surface_line",
]

LISTENING_PREFIX = "THAW_LISTENING"
SLOTS = 65536
"""Connection slots per replica: one state byte each in its state file (64 KiB)."""
SLOT_BYTES = 4
DRAIN = (1 << (8 * SLOT_BYTES)) - 1
"""The message value (never a slot: slots are below SLOTS) that tells a replica it is drained."""
MAX_SLOTS_PER_REPORT = 512
MAX_REPORT_LINE_BYTES = 65536
_MAX_COUNT = 1 << 62  # counts and slots beyond this are not a replica's
_FIELDS = ("in_flight", "busy_s", "connections", "received", "closed", "returned", "t")
_REQUIRED = frozenset(_FIELDS) - {"closed", "returned"}


class SlotState(IntEnum):
    """A handed-off connection's state byte: what its client is owed if the replica dies."""

    IDLE = 0  # no request begun since the last response went whole to the kernel: the
    #           activator serves the connection's next request itself
    STARTED = 1  # request bytes consumed, nothing of the answer written: the activator
    #              answers 502 JSON (the request is not replayed)
    RESPONDING = 2  # a response is being written (or still flushing): the activator aborts
    #                 the connection, so the client never sees a body that looks complete


class Surface(StrEnum):
    """A listener besides the v2 HTTP one, named as its announcement line names it."""

    GRPC = "GRPC"  # the GRPCInferenceService; its address is HOST:PORT (gRPC's target form)
    METRICS = "METRICS"  # Triton's metrics port; its address is http://HOST:PORT


def surface_line(surface: Surface, address: str) -> str:
    """The line a replica prints once its `surface` listener accepts connections."""
    return f"{LISTENING_PREFIX}_{surface.value} {address}"


def surface_address(line: str) -> tuple[Surface, str] | None:
    """The surface and address of an announcement line, or None for any other line."""
    head, _, address = line.strip().partition(" ")
    address = address.strip()
    kind = head.removeprefix(f"{LISTENING_PREFIX}_")
    if kind == head or not address or kind not in Surface.__members__:
        return None
    return Surface(kind), address


def listening_line(url: str) -> str:
    """The line a replica prints once it accepts connections at `url`."""
    return f"{LISTENING_PREFIX} {url}"


def listening_url(line: str) -> str | None:
    """The URL of a listening line (surrounding whitespace ignored), or None for any other."""
    head, _, url = line.strip().partition(" ")
    url = url.strip()
    return url if head == LISTENING_PREFIX and url else None


def encode_slot(slot: int) -> bytes:
    """A handoff message's data bytes for `slot` (0 <= slot < 2**32)."""
    return slot.to_bytes(SLOT_BYTES, "big")


def decode_slot(data: bytes) -> int | None:
    """The slot of a handoff message's data bytes, or None when they are not SLOT_BYTES long."""
    return int.from_bytes(data, "big") if len(data) == SLOT_BYTES else None


@dataclass(frozen=True, slots=True)
class LoadReport:
    """One load report of a replica about its handed-off connections.

    `in_flight` requests now; `busy_s`, the integral of in-flight requests over time in
    seconds (so two reports give the exact mean concurrency between them), at `t`, the
    replica's `time.monotonic()` (the activator's clock too, on one machine); `connections`
    open; `received`, handoff messages taken so far; `closed`, slots of connections the replica
    ended (shut down: the client saw FIN); `returned`, slots it did not take (unread: the
    activator serves them).
    """

    in_flight: int
    busy_s: float
    connections: int
    t: float
    received: int = 0
    closed: tuple[int, ...] = ()
    returned: tuple[int, ...] = ()

    def busy_at(self, now: float) -> float:
        """`busy_s` extrapolated to `now` (the in-flight count held since the report)."""
        return self.busy_s + self.in_flight * max(0.0, now - self.t)

    def to_line(self) -> bytes:
        """The report as one JSON line, newline included. Raises WireError for a report that
        `from_line` would refuse (negative counts, too many slots, non-finite times)."""
        _check(self)
        line = json.dumps(
            {
                "in_flight": self.in_flight,
                "busy_s": self.busy_s,
                "connections": self.connections,
                "received": self.received,
                "closed": list(self.closed),
                "returned": list(self.returned),
                "t": self.t,
            },
            separators=(",", ":"),
        ).encode()
        return line + b"\n"

    @classmethod
    def from_line(cls, line: bytes) -> LoadReport:
        """The report of one line (with or without its newline); WireError for anything else."""
        if len(line) > MAX_REPORT_LINE_BYTES:
            raise WireError(f"load report of {len(line)} bytes, over {MAX_REPORT_LINE_BYTES}")
        try:
            doc = json.loads(line)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise WireError(f"load report is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise WireError("load report is not a JSON object")
        unknown, missing = set(doc) - set(_FIELDS), _REQUIRED - set(doc)
        if unknown or missing:
            raise WireError(
                f"load report fields: unknown {sorted(unknown)}, missing {sorted(missing)}"
            )
        report = cls(
            in_flight=_count(doc, "in_flight"),
            busy_s=_seconds(doc, "busy_s"),
            connections=_count(doc, "connections"),
            t=_seconds(doc, "t"),
            received=_count(doc, "received"),
            closed=_slots(doc, "closed"),
            returned=_slots(doc, "returned"),
        )
        _check(report)
        return report


def _count(doc: dict[str, Any], key: str) -> int:
    value = doc[key]
    if type(value) is not int or not 0 <= value < _MAX_COUNT:  # bool is not a count
        raise WireError(f"load report `{key}` = {value!r}, must be an integer in [0, 2**62)")
    return value


def _seconds(doc: dict[str, Any], key: str) -> float:
    value = doc[key]
    if type(value) not in (int, float) or not math.isfinite(value):
        raise WireError(f"load report `{key}` = {value!r}, must be a finite number")
    return float(value)


def _slots(doc: dict[str, Any], key: str) -> tuple[int, ...]:
    values = doc.get(key, [])
    if not isinstance(values, list):
        raise WireError(f"load report `{key}` must be a list of slots")
    slots = []
    for value in values:
        if type(value) is not int or not 0 <= value < 1 << (8 * SLOT_BYTES):
            raise WireError(f"load report `{key}` holds {value!r}, not a slot")
        slots.append(value)
    return tuple(slots)


def _check(report: LoadReport) -> None:
    """What both directions refuse beyond the field types."""
    if report.busy_s < 0 or not math.isfinite(report.busy_s) or not math.isfinite(report.t):
        raise WireError(f"load report times busy_s={report.busy_s!r}, t={report.t!r}")
    if min(report.in_flight, report.connections, report.received) < 0:
        raise WireError("load report counts must not be negative")
    if max(len(report.closed), len(report.returned)) > MAX_SLOTS_PER_REPORT:
        raise WireError(f"load report lists more than {MAX_SLOTS_PER_REPORT} slots")
