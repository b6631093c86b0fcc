"""Explicit mode's load state shared through the fleet's load-state Lease: read, written, re-read.

    write(changes)  a load/unload call: read the Lease, apply the change (load_state_doc.apply),
                    replace it carrying the resourceVersion read (create it when there is none);
                    409 (another activator wrote first) -> read again and apply again, a few
                    times; API errors retried (back-off) within one API timeout; then
                    `ScalerUnavailable` (503), the change not made anywhere
    run()           every `period_s` read the Lease again; a document that changes models is
                    handed to the watchers. A failed read keeps the last known document in
                    force (logged once per outage), so an unreachable API server neither
                    loads nor unloads anything
    refresh()       a request for a model not loaded here: read the Lease now (a read begun
                    after the call; one at a time, at most one every REFRESH_MIN_S), so a
                    load answered by another activator before the request was sent is seen

An unload on one activator is seen by the others within `period_s` plus one read (the scaling
Lease's retry period: an eighth of `--lease-duration-s`) while the API server answers; a load,
by the next request for the model (`refresh`): a client that loads a model through one
activator and sends its requests through another (the Service balances connections) is
served, not refused until the next periodic read.
Verbs: get, create and update on leases, which the scaling Lease needs already.

`SharedLoadStates` is the Kubernetes backend's side of `SharedLoadState`: the watchers the fleet
gives before the backend starts, the Lease opened (and first read) at the start.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

from activator.errors import ScalerUnavailable
from activator.scaler.kube_config import KubernetesConfig
from activator.scaler.kubernetes.api import KubeApi, KubeApiError, with_retries
from activator.scaler.kubernetes.backoff import Backoff
from activator.scaler.kubernetes.leader_lease import retry_period_s
from activator.scaler.kubernetes.load_state_doc import (
    ANNOTATION_LOAD_STATE,
    LoadStateDoc,
    LoadStateView,
    apply,
    lease_name,
    parse,
)

__all__ = ["REFRESH_MIN_S", "LoadStateLease", "SharedLoadStates"]

logger = logging.getLogger(__name__)

_CONFLICT_ATTEMPTS = 5  # writes that meet another activator's write (409), read again each time
# How often a refresh may begin a read of the Lease: requests for a model no activator loaded
# cost the API server one read per interval, and wait at most this long for it.
REFRESH_MIN_S = 0.1


class LoadStateLease:
    """The fleet's shared load state in the Lease `name` (module docstring)."""

    def __init__(
        self,
        api: KubeApi,
        name: str,
        *,
        fleet: str,
        period_s: float,
        timeout_s: float,
        backoff: Backoff,
        rng: random.Random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._api = api
        self._fleet = fleet
        self._period_s = period_s
        self._backoff = backoff
        self._rng = rng
        self._clock = clock
        self._timeout_s = timeout_s
        self.view = LoadStateView()
        self._watchers: list[Callable[[Mapping[str, str]], None]] = []
        self._lock = asyncio.Lock()  # this activator's writes, one at a time
        # Refreshes: how many reads they began, the one in progress and its number, and when
        # (the clock) the last began.
        self._refreshes = 0
        self._refreshing: tuple[asyncio.Future[None], int] | None = None
        self._refreshed_at = -math.inf

    @property
    def states(self) -> Mapping[str, str]:
        """Each model the fleet's document names, and its state, as last known."""
        return self.view.doc.models

    def watch(self, changed: Callable[[Mapping[str, str]], None]) -> None:
        """Call `changed(models whose state changed -> new state)` on each change another
        activator made (this one's own writes are not told: their caller acts on them)."""
        self._watchers.append(changed)

    async def read(self) -> None:
        """Read the Lease now and adopt its document (KubeApiError when it cannot be read,
        ValueError when its annotation is not a document)."""
        lease = await self._api.read_lease(self.name)
        self._offer(parse(lease))

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._period_s)
            try:
                await self.read()
            except (KubeApiError, ValueError) as exc:
                first = self.view.failing_since is None
                self.view.failed(self._clock())
                if first:
                    message = exc.message if isinstance(exc, KubeApiError) else str(exc)
                    logger.warning(
                        "load state lease %s: %s; keeping the last known load state",
                        self.name, message,
                    )  # fmt: skip

    async def refresh(self) -> None:
        """Read the Lease again for a caller that must see what was written before it asked
        (a request for a model not loaded here): join a read begun after this call, else begin
        one, at most one every REFRESH_MIN_S, each bounded by the API timeout. A read that
        fails keeps the last known document (as `run`'s); while reads fail (until `run`'s
        next one succeeds) a refresh returns at once, so requests are not held for an API
        server that does not answer. Never raises."""
        asked = self._refreshes
        while self.view.failing_since is None:
            if self._refreshing is not None:
                reading, number = self._refreshing
                await asyncio.shield(reading)
                if number > asked:
                    return
                continue
            wait_s = self._refreshed_at + REFRESH_MIN_S - self._clock()
            if wait_s > 0:
                await asyncio.sleep(wait_s)
                continue
            self._refreshes += 1
            self._refreshed_at = self._clock()
            reading = asyncio.ensure_future(self._read_for_refresh())
            self._refreshing = (reading, self._refreshes)
            reading.add_done_callback(lambda _: setattr(self, "_refreshing", None))

    async def _read_for_refresh(self) -> None:
        try:
            async with asyncio.timeout(self._timeout_s):
                await self.read()
        except (KubeApiError, ValueError, TimeoutError) as exc:
            first = self.view.failing_since is None
            self.view.failed(self._clock())
            if first:  # once per outage, as `run` logs it
                why = exc.message if isinstance(exc, KubeApiError) else str(exc) or "timed out"
                logger.warning(
                    "load state lease %s: %s; keeping the last known load state", self.name, why
                )

    async def write(self, changes: Mapping[str, str]) -> None:
        """Write `changes` (model -> "loaded" | "named" | "unloaded" | "down") into the fleet's
        document and adopt it here; `ScalerUnavailable` (503) when that could not be done
        (nothing changed)."""
        what = ", ".join(f"{m}: {s}" for m, s in changes.items())
        try:
            async with self._lock, asyncio.timeout(self._timeout_s * 2):
                deadline = self._clock() + self._timeout_s
                for _ in range(_CONFLICT_ATTEMPTS):
                    read, written = await with_retries(
                        lambda: self._write_once(changes),
                        backoff=self._backoff, rng=self._rng, deadline=deadline,
                        clock=self._clock,
                    )  # fmt: skip
                    self._offer(read)  # other activators' changes: told to the watchers
                    if written is not None:
                        self._offer(written, tell=False)  # this one's: its caller acts on it
                        return
                raise KubeApiError(409, "Conflict", "the Lease kept changing")
        except (KubeApiError, ValueError, TimeoutError) as exc:
            if isinstance(exc, KubeApiError):
                reason = exc.message
            elif isinstance(exc, TimeoutError):
                reason = f"no answer within {self._timeout_s * 2:g} s"
            else:
                reason = str(exc)
            raise ScalerUnavailable(
                f"the fleet's load state could not be written ({what}): Lease "
                f"{self._api.namespace}/{self.name}: {reason}; the load state of the fleet's "
                "activators is unchanged, try again"
            ) from exc

    async def _write_once(
        self, changes: Mapping[str, str]
    ) -> tuple[LoadStateDoc, LoadStateDoc | None]:
        """One read-modify-write: the document read, and the one written (None when another
        activator wrote in between: 409)."""
        lease = await self._api.read_lease(self.name)
        read = parse(lease)
        doc = apply(read, changes)
        try:
            if lease is None:
                written = await self._api.create_lease(self._new_lease(doc))
            else:
                written = await self._api.replace_lease(self.name, _with_doc(lease, doc))
        except KubeApiError as exc:
            if exc.status == 409:  # Conflict, or AlreadyExists: someone else wrote first
                return read, None
            raise
        return read, parse(written)

    def _new_lease(self, doc: LoadStateDoc) -> dict[str, Any]:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "labels": {"thaw.dev/fleet": self._fleet},
                "annotations": {ANNOTATION_LOAD_STATE: doc.text()},
            },
            "spec": {},
        }

    def _offer(self, doc: LoadStateDoc, *, tell: bool = True) -> None:
        changed = self.view.offer(doc, self._clock())
        if not changed or not tell:
            return
        for watcher in self._watchers:
            try:
                watcher(changed)
            except Exception:
                logger.exception("load state lease %s: a watcher failed", self.name)


def _with_doc(lease: Mapping[str, Any], doc: LoadStateDoc) -> dict[str, Any]:
    """The Lease as read, its annotation replaced (its resourceVersion kept: the precondition)."""
    meta = dict(lease.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), ANNOTATION_LOAD_STATE: doc.text()}
    meta.pop("managedFields", None)
    body = {**lease, "metadata": meta}
    body.setdefault("apiVersion", "coordination.k8s.io/v1")
    body.setdefault("kind", "Lease")
    return body


class SharedLoadStates:
    """The fleet's load state as the Kubernetes backend shares it (SharedLoadState): off until
    the fleet gives a watcher (`share`: explicit mode), then opened with the backend (`open`)."""

    def __init__(self) -> None:
        # The watchers given before the start (None: not shared, not explicit mode).
        self._watchers: list[Callable[[Mapping[str, str]], None]] | None = None
        self._lease: LoadStateLease | None = None

    @property
    def wanted(self) -> bool:
        """Whether the fleet shares its load state (a watcher was given)."""
        return self._watchers is not None

    def share(self, changed: Callable[[Mapping[str, str]], None]) -> None:
        if self._watchers is None:
            self._watchers = []
        self._watchers.append(changed)
        if self._lease is not None:  # after the start: from the next change on
            self._lease.watch(changed)

    def states(self) -> Mapping[str, str]:
        return self._lease.states if self._lease is not None else {}

    async def refresh(self) -> None:
        if self._lease is not None:
            await self._lease.refresh()

    async def write(self, changes: Mapping[str, str]) -> None:
        if self._lease is None:
            raise ScalerUnavailable("kubernetes scaler: the load state is not shared (not started)")
        await self._lease.write(changes)

    async def open(
        self,
        api: KubeApi,
        kube: KubernetesConfig,
        *,
        backoff: Backoff,
        rng: random.Random,
        clock: Callable[[], float],
    ) -> LoadStateLease:
        """Read the fleet's load state once (ScalerUnavailable when it cannot be); the caller
        runs the returned Lease's `run()`, which reads it again every retry period of the
        scaling Lease."""
        lease = LoadStateLease(
            api,
            lease_name(kube.lease_name),
            fleet=kube.fleet,
            period_s=retry_period_s(kube.lease_duration_s),
            timeout_s=kube.api_timeout_s,
            backoff=backoff,
            rng=rng,
            clock=clock,
        )
        for watcher in self._watchers or ():
            lease.watch(watcher)  # told the first read too: the fleet's state, not the flags
        try:
            await lease.read()
        except KubeApiError as exc:
            raise ScalerUnavailable(f"kubernetes scaler: load state: {exc.message}") from exc
        except ValueError as exc:
            raise ScalerUnavailable(
                f"kubernetes scaler: load state: Lease {kube.namespace}/{lease.name}: {exc}"
            ) from exc
        self._lease = lease
        return lease
