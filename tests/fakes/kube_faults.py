"""Fault injection for the fake API server: the next N requests matching (verb, resource) fail
with a status (429 with Retry-After, 500, 503, ...), are delayed, or have their connection
dropped before any response byte. Thread-safe, so a test arms faults from its own thread."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Fault", "FaultAction", "Faults"]

_REASONS = {
    429: ("TooManyRequests", "Too many requests, please try again later."),
    500: ("InternalError", "Internal error occurred: injected fault"),
    503: ("ServiceUnavailable", "The server is currently unable to handle the request"),
    504: ("Timeout", "The server was unable to respond in time (injected)"),
    403: ("Forbidden", "forbidden (injected)"),
    404: ("NotFound", "not found (injected)"),
    409: ("Conflict", "Operation cannot be fulfilled: the object has been modified (injected)"),
    410: ("Expired", "too old resource version (injected)"),
}


class FaultAction(StrEnum):
    STATUS = "status"
    DELAY = "delay"
    DROP = "drop"


@dataclass
class Fault:
    """One armed fault. `resource` is a plural (`pods`), a subresource path (`pods/status`,
    `deployments/scale`) or `*`; `verb` a Kubernetes verb (get, list, watch, create, update,
    patch, delete, deletecollection) or `*`."""

    verb: str
    resource: str
    action: FaultAction
    remaining: int
    code: int = 500
    retry_after_s: int | None = None
    delay_s: float = 0.0

    def matches(self, verb: str, resource: str) -> bool:
        return self.verb in ("*", verb) and self.resource in ("*", resource)

    @property
    def reason(self) -> str:
        return _REASONS.get(self.code, ("InternalError", ""))[0]

    @property
    def message(self) -> str:
        return _REASONS.get(self.code, ("", f"injected fault (HTTP {self.code})"))[1]


class Faults:
    """The armed faults, consumed in the order they were armed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self.fired: list[tuple[str, str, FaultAction]] = []

    def fail(
        self,
        verb: str,
        resource: str,
        *,
        code: int = 500,
        times: int = 1,
        retry_after_s: int | None = None,
    ) -> None:
        """The next `times` matching requests get `code` with a `Status` body; a 429 carries
        `Retry-After` (`retry_after_s`, default 1) as the real server's priority-and-fairness
        rejections do."""
        if code == 429 and retry_after_s is None:
            retry_after_s = 1
        self._arm(
            Fault(verb, resource, FaultAction.STATUS, times, code=code, retry_after_s=retry_after_s)
        )

    def delay(self, verb: str, resource: str, seconds: float, *, times: int = 1) -> None:
        """The next `times` matching requests wait `seconds` before being served."""
        self._arm(Fault(verb, resource, FaultAction.DELAY, times, delay_s=seconds))

    def drop(self, verb: str, resource: str, *, times: int = 1) -> None:
        """The next `times` matching requests have their connection closed unanswered."""
        self._arm(Fault(verb, resource, FaultAction.DROP, times))

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def take(self, verb: str, resource: str) -> Fault | None:
        """The first armed fault matching this request, counted as used."""
        with self._lock:
            for fault in self._faults:
                if fault.matches(verb, resource):
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        self._faults.remove(fault)
                    self.fired.append((verb, resource, fault.action))
                    return fault
            return None

    def _arm(self, fault: Fault) -> None:
        if fault.remaining < 1:
            raise ValueError(f"`times` = {fault.remaining}, must be >= 1")
        with self._lock:
            self._faults.append(fault)
