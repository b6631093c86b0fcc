"""One row of the device check's table, and `Skipped`: why a row cannot run on this machine."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Row:
    """One line of the table. `ok` False fails the check (a mismatch or an error); `skipped`
    says why it did not run, `hardware` whether that is this machine's hardware (allowed
    under --strict) rather than something missing or the time budget (not allowed)."""

    check: str
    result: str
    baseline: str = ""
    verdict: str = ""
    ok: bool = True
    skipped: str | None = None
    hardware: bool = False
    missing: str | None = None  # the package or tool whose absence skipped it


class Skipped(Exception):
    """A row cannot run here: `missing` names what this machine lacks (a package, a tool);
    `hardware` when it is the hardware (fewer GPUs, too little /dev/shm)."""

    def __init__(self, reason: str, *, missing: str | None = None, hardware: bool = False):
        super().__init__(reason)
        self.missing, self.hardware = missing, hardware
