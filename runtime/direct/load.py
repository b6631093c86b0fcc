"""In-flight requests on handed-off connections and their time integral, as load reports say."""

from __future__ import annotations

from thawwire.handoff_protocol import LoadReport

__all__ = ["DirectLoad"]


class DirectLoad:
    """In-flight requests on handed-off connections, their integral over time (`busy_s`, in
    request-seconds) and the open connections; `report` is the load report line of now."""

    __slots__ = ("_since", "busy_s", "connections", "in_flight")

    def __init__(self, now: float) -> None:
        self.in_flight = 0
        self.connections = 0
        self.busy_s = 0.0
        self._since = now

    def change(self, now: float, delta: int) -> None:
        self.busy_s += self.in_flight * (now - self._since)
        self._since = now
        self.in_flight += delta

    def report(
        self,
        now: float,
        received: int,
        *,
        closed: list[int] | None = None,
        returned: list[int] | None = None,
    ) -> bytes:
        """One report line; `received` counts the handoff messages taken so far, `closed`
        and `returned` are connection slots (thawwire.handoff_protocol.LoadReport)."""
        self.change(now, 0)
        report = LoadReport(
            in_flight=self.in_flight,
            busy_s=self.busy_s,
            connections=self.connections,
            t=now,
            received=received,
            closed=tuple(closed or ()),
            returned=tuple(returned or ()),
        )
        return report.to_line()
