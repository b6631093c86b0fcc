"""A handoff link's fallback (activator.direct.handoff.Fallback) that records what it was given."""

from __future__ import annotations

import socket

from activator.direct.orphans import Outcome

__all__ = ["FakeDoor"]


class FakeDoor:
    """The front door as a link's fallback: what it took back and counted."""

    def __init__(self) -> None:
        self.taken_back: list[socket.socket] = []
        self.counts: list[tuple[str, Outcome]] = []

    def take_back(self, conn: socket.socket) -> None:
        self.taken_back.append(conn)

    def count(self, model: str, outcome: Outcome) -> None:
        self.counts.append((model, outcome))
