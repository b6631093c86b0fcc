"""`thaw up`'s log settings: the activator's own logging, and the same settings pushed to every
replica (docs/decisions/0021-trace-and-logging-settings.md).

A client's change applies to the activator's log at once and is posted to each ready replica's
`/v2/logging`; a replica that becomes ready later (a wake, a scale-up) is sent the settings as it
does. Until a client changes anything, nothing is sent: replicas keep the log settings they were
started with. The replica's own log file is never sent (a replica refuses one, as any Triton).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from activator.endpoint.model_endpoint import ModelEndpoint
from activator.endpoint.replica import Replica
from activator.fleet.replica_push import ReplicaPoster
from thawserver.log_control import LogControl
from thawwire.log_settings import LogSettings

__all__ = ["FleetLogSettings", "ready_urls"]


def ready_urls(endpoints: Iterable[ModelEndpoint]) -> list[str]:
    """The routable replicas of `endpoints`, each once (a shared replica serves several)."""
    return sorted({r.url for e in endpoints for r in e.replicas if r.routable})


class FleetLogSettings:
    """The LogTarget of `thaw up` (thawserver.settings_api): this process's logging, and its
    replicas' once a client has changed the settings."""

    def __init__(self, control: LogControl) -> None:
        self._control = control
        self._changed = False  # whether replicas must be told (a client changed something)
        self._poster: ReplicaPoster | None = None
        self._endpoints: tuple[ModelEndpoint, ...] = ()

    @property
    def settings(self) -> LogSettings:
        return self._control.settings

    def attach(self, poster: ReplicaPoster, endpoints: Iterable[ModelEndpoint]) -> None:
        """Reach the replicas of `endpoints` through `poster` from now on (the fleet's start)."""
        self._poster = poster
        self._endpoints = tuple(endpoints)
        for endpoint in self._endpoints:
            endpoint.add_ready_listener(self._replica_ready)

    def add(self, endpoint: ModelEndpoint) -> None:
        """Reach the replicas of `endpoint` too (a model added after the start)."""
        self._endpoints = (*self._endpoints, endpoint)
        endpoint.add_ready_listener(self._replica_ready)

    def apply(self, settings: LogSettings) -> None:
        self._control.apply(settings)
        self._changed = True
        for url in ready_urls(self._endpoints):
            self._push(url)

    def _replica_ready(self, replica: Replica) -> None:
        if self._changed:
            self._push(replica.url)

    def _push(self, url: str) -> None:
        if self._poster is not None:
            self._poster.post(url, "/v2/logging", self._body)

    def _body(self) -> dict[str, Any]:
        body = self._control.settings.as_json()
        del body["log_file"]  # the replica's own; a replica refuses a file anyway
        return body
