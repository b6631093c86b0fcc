"""`thaw up`'s trace settings, told to its replicas (docs/decisions/0021): each local replica
starts with the operator's setting and a trace file of its own (activator.scaler.local's
`serve_args`); once a client changes a setting, every ready replica is sent the effective
global setting and, for each model it serves, that model's (or a clear, when the model follows
the global one), and so is each replica that becomes ready later. The values sent are the
effective ones, so a replica's merge gives what `thaw up` answers; never a file.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

from activator.endpoint.model_endpoint import ModelEndpoint
from activator.endpoint.replica import Replica
from activator.fleet.replica_push import ReplicaPoster
from thawwire.trace_settings import TraceSetting, TraceSettings

__all__ = ["FleetTraceSettings"]

_CLEAR = {"trace_level": None, "trace_rate": None, "trace_count": None, "log_frequency": None}


def _values(setting: TraceSetting) -> dict[str, Any]:
    doc = setting.as_json()
    return {key: doc[key] for key in _CLEAR}


class FleetTraceSettings:
    """Tells replicas the activator's trace settings once a client has changed them."""

    def __init__(self, settings: TraceSettings) -> None:
        self._settings = settings
        self._changed = False
        self._poster: ReplicaPoster | None = None
        self._endpoints: Mapping[str, ModelEndpoint] = {}

    def attach(self, poster: ReplicaPoster, endpoints: Mapping[str, ModelEndpoint]) -> None:
        """Reach the replicas of `endpoints` (by model) through `poster` from now on."""
        self._poster = poster
        self._endpoints = endpoints
        for name, endpoint in endpoints.items():
            endpoint.add_ready_listener(functools.partial(self._ready, name))

    def add(self, name: str, endpoint: ModelEndpoint) -> None:
        """Reach the replicas of model `name` too (added after the start; `_endpoints` is the
        fleet's live mapping, which has it already)."""
        endpoint.add_ready_listener(functools.partial(self._ready, name))

    def changed(self) -> None:
        """A client changed a setting: tell every ready replica."""
        self._changed = True
        for model, endpoint in self._endpoints.items():
            for url in sorted({r.url for r in endpoint.replicas if r.routable}):
                self._push(url, (model,))

    def _ready(self, model: str, replica: Replica) -> None:
        if self._changed:
            self._push(replica.url, (model,))

    def _push(self, url: str, models: Iterable[str]) -> None:
        if self._poster is None:
            return
        self._poster.post(url, "/v2/trace/setting", lambda: _values(self._settings.setting()))
        for model in models:
            body = functools.partial(self._model_body, model)
            self._poster.post(url, f"/v2/models/{model}/trace/setting", body)

    def _model_body(self, model: str) -> dict[str, Any]:
        if self._settings.has_own(model):
            return _values(self._settings.setting(model))
        return dict(_CLEAR)  # it follows the global setting, on the replica too
