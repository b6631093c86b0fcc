"""Peer reports between active-active activators: followers tell the scaling leader their load.

    follower ─ POST /thaw/peer/v1/report {"activator": id, "models": {m: {mean, current}}} ─▶
             ◀─ 200 {"leader": id, "models": {m: {mean, current}}}  (totals over every activator)
             ◀─ 409 {"error": "not the scaling leader", "leader": holder}   (it no longer leads)

A follower reports every `interval_s`, and at once when a model's demand appears on it (a
request held while it has no replica) or goes, so the leader scales a cold model without
waiting for a period, and does not wake it again on a report of requests already served.
The leader stores each report (`peer_load.PeerTable`), scales on its own load plus the
others', and wakes a model's reconciler when demand for it appears elsewhere. The totals it
answers let every follower attach to as many replicas as the whole fleet needs. The port is
separate from the public one: the NetworkPolicy lets only activator pods reach it. Reports
are untrusted input: bounded, strictly typed, unknown models ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import socket
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web

from activator.observe.metrics import Metrics
from activator.scaler.backend import PeerLoad
from activator.scaler.kubernetes.peer_load import LeaderTotals, ModelLoad, PeerTable

__all__ = ["REPORT_PATH", "PeerReports", "parse_report"]

logger = logging.getLogger(__name__)

REPORT_PATH = "/thaw/peer/v1/report"
_MAX_BODY = 1 << 20
_MAX_ID = 253
_MAX_LOAD = 10_000_000
_SEND_TIMEOUT = aiohttp.ClientTimeout(total=1.0)


def parse_report(data: Any, known: frozenset[str]) -> tuple[str, dict[str, PeerLoad]]:
    """(activator id, load of each known model) from a decoded report; ValueError says why."""
    if not isinstance(data, dict):
        raise ValueError("a report is a JSON object")
    activator = data.get("activator")
    if not isinstance(activator, str) or not 0 < len(activator) <= _MAX_ID:
        raise ValueError(f"`activator` must be a string of 1-{_MAX_ID} characters")
    models = data.get("models")
    if not isinstance(models, dict):
        raise ValueError("`models` must be an object of model -> {mean, current}")
    loads: dict[str, PeerLoad] = {}
    for model, load in models.items():
        if model not in known:
            continue  # a model this activator does not serve (another repository version)
        if not isinstance(load, dict):
            raise ValueError(f"`models.{model[:100]}` must be an object")
        mean, current = load.get("mean"), load.get("current")
        if (
            isinstance(mean, bool)
            or not isinstance(mean, int | float)
            or not math.isfinite(mean)
            or not 0 <= mean <= _MAX_LOAD
        ):
            raise ValueError(f"`models.{model}.mean` must be a number in [0, {_MAX_LOAD}]")
        if isinstance(current, bool) or not isinstance(current, int):
            raise ValueError(f"`models.{model}.current` must be an integer in [0, {_MAX_LOAD}]")
        if not 0 <= current <= _MAX_LOAD:
            raise ValueError(f"`models.{model}.current` must be an integer in [0, {_MAX_LOAD}]")
        loads[model] = PeerLoad(float(mean), current)
    return activator, loads


def _loads_json(loads: ModelLoad) -> dict[str, dict[str, float | int]]:
    return {m: {"mean": round(load.mean, 6), "current": load.current} for m, load in loads.items()}


class PeerReports:
    """This activator's side of the reports: the server (taken while leading) and the sender
    (while following). `is_leader`, `leader`, `leader_url` come from the Lease."""

    def __init__(
        self,
        identity: str,
        session: aiohttp.ClientSession,
        metrics: Metrics,
        *,
        models: frozenset[str],
        host: str,
        port: int,
        interval_s: float,
        ttl_s: float,
        is_leader: Callable[[], bool],
        leader: Callable[[], str | None],
        leader_url: Callable[[], str | None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.identity = identity
        self.port = port
        self._session = session
        self._metrics = metrics
        self._models = models
        self._host = host
        self._interval_s = interval_s
        self._is_leader = is_leader
        self._leader = leader
        self._leader_url = leader_url
        self._clock = clock
        self._table = PeerTable(ttl_s)
        self._totals = LeaderTotals(ttl_s)
        self._own: dict[str, PeerLoad] = {}
        self._wakers: dict[str, list[Callable[[], object]]] = {}
        self._urgent = asyncio.Event()
        self._runner: web.AppRunner | None = None

    # ---- what the reconcilers call (PeerConcurrency) ------------------------------------

    def exchange(self, model: str, *, mean: float, current: int) -> PeerLoad:
        previous = self._own.get(model, PeerLoad())
        self._own[model] = PeerLoad(mean, current)
        now = self._clock()
        if self._is_leader():
            return self._table.others(model, now, exclude=self.identity)
        if (current > 0) != (previous.current > 0):
            # Demand appeared here, or went: tell the leader now, not next period (a stale
            # "held here" would wake the model again after it scaled it to zero).
            self._urgent.set()
        return self._totals.others(model, now)

    def watch_demand(self, model: str, wake: Callable[[], object]) -> None:
        self._wakers.setdefault(model, []).append(wake)

    def forget_demand(self, model: str) -> None:
        self._table.forget(model)

    def demand(self, model: str) -> int:
        """Requests for `model` held or in flight: here (as last exchanged) and on the other
        activators (their reports, or the leader's last totals)."""
        now = self._clock()
        own = self._own.get(model, PeerLoad()).current
        if self._is_leader():
            return own + self._table.others(model, now, exclude=self.identity).current
        return own + self._totals.others(model, now).current

    def live_peers(self) -> int:
        """Other activators that reported to this one (as leader) within the TTL."""
        return self._table.live_peers(self._clock())

    # ---- the leader's server ------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application(client_max_size=_MAX_BODY)
        app.add_routes([web.post(REPORT_PATH, self._receive)])
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        # Bound here, so that `port` 0 (any free port) is known before the Lease names it.
        listener = socket.create_server((self._host, self.port), reuse_port=False)
        self.port = int(listener.getsockname()[1])
        await web.SockSite(self._runner, listener).start()

    async def _receive(self, request: web.Request) -> web.Response:
        if not self._is_leader():
            self._metrics.peer_reports.labels("refused").inc()
            body = {"error": "not the scaling leader", "leader": self._leader()}
            return web.json_response(body, status=409)
        try:
            activator, loads = parse_report(await request.json(loads=_strict_json), self._models)
        except (ValueError, UnicodeDecodeError) as exc:
            self._metrics.peer_reports.labels("invalid").inc()
            return web.json_response({"error": f"bad peer report: {exc}"}, status=400)
        self._metrics.peer_reports.labels("received").inc()
        for model in self._table.update(activator, loads, self._clock()):
            logger.info("model=%s demand on activator %s", model, activator)
            for wake in self._wakers.get(model, []):
                wake()
        return web.json_response({"leader": self.identity, "models": _loads_json(self.totals())})

    def totals(self) -> dict[str, PeerLoad]:
        """Every served model's concurrency over all activators (leader's view)."""
        now = self._clock()
        result = {}
        for model in self._models:
            own = self._own.get(model, PeerLoad())
            others = self._table.others(model, now, exclude=self.identity)
            result[model] = PeerLoad(own.mean + others.mean, own.current + others.current)
        return result

    # ---- the follower's sender ----------------------------------------------------------

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval_s):
                    await self._urgent.wait()
            self._urgent.clear()
            url = self._leader_url()
            if self._is_leader() or url is None:
                self._totals.forget()
                continue
            await self._send(url)

    async def _send(self, url: str) -> None:
        own = dict(self._own)
        report = {"activator": self.identity, "models": _loads_json(own)}
        try:
            async with self._session.post(
                f"{url}{REPORT_PATH}", json=report, timeout=_SEND_TIMEOUT
            ) as resp:
                data = await resp.json(loads=_strict_json) if resp.status == 200 else None
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            self._metrics.peer_reports.labels("send_failed").inc()
            logger.debug("peer report to %s failed: %s", url, exc)
            return
        if data is None:
            self._metrics.peer_reports.labels("send_refused").inc()
            return
        try:
            _, totals = parse_report({"activator": "leader", **data}, self._models)
        except ValueError as exc:
            self._metrics.peer_reports.labels("send_failed").inc()
            logger.warning("peer report answer from %s unusable: %s", url, exc)
            return
        self._metrics.peer_reports.labels("sent").inc()
        self._totals.accept(totals, own, self._clock())

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def _strict_json(text: str) -> Any:
    """JSON without NaN/Infinity (Python's json accepts them; a report must not)."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)
