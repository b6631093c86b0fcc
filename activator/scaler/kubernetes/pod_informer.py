"""A cache of the pods one label selector matches, kept current by list + watch.

    list (items + resourceVersion) ─▶ watch from it ─▶ events applied ─▶ server ends the watch
       ▲                                  │                                │
       └── 410 Gone / an error (back-off) ┘      resume from the last seen resourceVersion

The backend's readiness comes from probing pods directly; this is the backstop that says a
pod is gone, deleting, restarted or unready, and which pool pods exist. A watch that ends
cleanly resumes from the last resourceVersion it saw (bookmarks included); 410 Gone (the
server's history no longer reaches back) re-lists; any other failure (429, 5xx, a dropped
connection, a timeout) waits with back-off and re-lists. After a re-list, pods that vanished
meanwhile are reported gone. Every change bumps `version` and wakes `wait_change` callers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from typing import Any

from activator.scaler.kubernetes.api import KubeApi, KubeApiError
from activator.scaler.kubernetes.backoff import Backoff
from activator.scaler.kubernetes.pod_state import Pod, name_of

__all__ = ["PodInformer"]

logger = logging.getLogger(__name__)


class PodInformer:
    """Pods matching `selector` by name; `run()` keeps them current until cancelled."""

    def __init__(
        self,
        api: KubeApi,
        selector: str,
        *,
        what: str,
        watch_timeout_s: int,
        backoff: Backoff,
        rng: random.Random,
        on_error: Callable[[KubeApiError], None] | None = None,
    ) -> None:
        self.selector = selector
        self.what = what  # for log lines: "pool pods", "model pods"
        self.synced = asyncio.Event()  # set once the first list is in
        self.version = 0  # bumped on every change
        self.relists = 0
        self._api = api
        self._watch_timeout_s = watch_timeout_s
        self._backoff = backoff
        self._rng = rng
        self._on_error = on_error
        self._pods: dict[str, Pod] = {}
        self._changed = asyncio.Event()

    # ---- reading ------------------------------------------------------------------------

    def get(self, name: str) -> Pod | None:
        return self._pods.get(name)

    def pods(self) -> list[Pod]:
        return list(self._pods.values())

    async def wait_change(self, seen: int, timeout_s: float) -> int:
        """Wait until `version` is past `seen` (or `timeout_s`); return the version now."""
        if self.version == seen:
            event = self._changed
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await event.wait()
        return self.version

    # ---- keeping it current -------------------------------------------------------------

    async def run(self) -> None:
        failures = 0
        while True:
            try:
                resource_version = await self._relist()
                failures = 0
                while True:  # a clean end of a watch resumes where it stopped
                    resource_version = await self._watch(resource_version)
            except KubeApiError as exc:
                if exc.status == 410:
                    logger.info("%s: watch history expired (410), listing again", self.what)
                    continue
                failures += 1
                if self._on_error is not None:
                    self._on_error(exc)
                delay = self._backoff.delay(failures, self._rng, retry_after_s=exc.retry_after_s)
                logger.warning("%s: %s; again in %.2f s", self.what, exc.message, delay)
                await asyncio.sleep(delay)

    async def _relist(self) -> str:
        items, resource_version = await self._api.list_pods(self.selector)
        self.relists += 1
        fresh = {name_of(p): p for p in items}
        if fresh != self._pods:
            self._pods = fresh
            self._bump()
        self.synced.set()
        return resource_version

    async def _watch(self, resource_version: str) -> str:
        events = self._api.watch_pods(
            self.selector, resource_version, timeout_s=self._watch_timeout_s
        )
        async for kind, obj in events:
            resource_version = _resource_version(obj) or resource_version
            if kind == "BOOKMARK":
                continue
            name = name_of(obj)
            if kind == "DELETED":
                if self._pods.pop(name, None) is not None:
                    self._bump()
            elif kind in ("ADDED", "MODIFIED"):
                self._pods[name] = obj
                self._bump()
        return resource_version

    def _bump(self) -> None:
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()


def _resource_version(obj: Any) -> str | None:
    if isinstance(obj, dict):
        value = (obj.get("metadata") or {}).get("resourceVersion")
        return str(value) if value else None
    return None
