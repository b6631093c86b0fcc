"""Watch streams of the fake API server: `?watch=true` answered as the real server does, with
newline-delimited JSON events over a chunked HTTP 200.

- No resourceVersion (or "0"): synthetic ADDED events for the current objects, then changes.
- resourceVersion=N: every retained event after N, then changes; N older than the retained
  history -> one ERROR event carrying a 410 `Status` (reason Expired), then the stream ends.
- Selectors filter as the watch cache does: an object that stops matching arrives as DELETED
  (its previous state), one that starts matching as ADDED.
- `allowWatchBookmarks=true`: BOOKMARK events every `bookmark_interval_s` and one just before
  `timeoutSeconds` ends the stream; a bookmark's resourceVersion is ordered after every event
  the stream has delivered (it is queued behind them under the store lock).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes.kube_errors import StatusError, bad_request
from tests.fakes.kube_resources import ResourceType
from tests.fakes.kube_selectors import FieldSelector, LabelSelector
from tests.fakes.kube_store import EventType, Store, StoreEvent

__all__ = ["WatchHub", "WatchOptions", "parse_bool", "serve_watch"]


@dataclass(frozen=True)
class _Bookmark:
    resource_version: int
    final: bool


_END = object()


class WatchHub:
    """The open watch streams, so a test can end them (or ask for bookmarks) all at once.
    Touched only on the server's event loop."""

    def __init__(self) -> None:
        self._queues: set[asyncio.Queue[Any]] = set()

    def add(self, queue: asyncio.Queue[Any]) -> None:
        self._queues.add(queue)

    def discard(self, queue: asyncio.Queue[Any]) -> None:
        self._queues.discard(queue)

    @property
    def open_count(self) -> int:
        return len(self._queues)

    def end_all(self) -> int:
        """End every open stream cleanly (as an expired `timeoutSeconds` does)."""
        for queue in self._queues:
            queue.put_nowait(_END)
        return len(self._queues)


@dataclass(frozen=True)
class WatchOptions:
    bookmark_interval_s: float
    max_watch_s: float


def _matcher(
    rtype: ResourceType, namespace: str | None, query: dict[str, str]
) -> Callable[[dict[str, Any]], bool]:
    labels = LabelSelector.parse(query.get("labelSelector"))
    fields = FieldSelector.parse(query.get("fieldSelector"), rtype.field_selectors)

    def matches(obj: dict[str, Any]) -> bool:
        meta = obj["metadata"]
        return (
            (namespace is None or meta.get("namespace") == namespace)
            and labels.matches(meta.get("labels"))
            and fields.matches(obj)
        )

    return matches


def _visible(
    event: StoreEvent, matches: Callable[[dict[str, Any]], bool]
) -> tuple[str, dict[str, Any]] | None:
    now = matches(event.object)
    if event.type is EventType.ADDED:
        return ("ADDED", event.object) if now else None
    if event.type is EventType.DELETED:
        return ("DELETED", event.object) if now else None
    before = event.previous is not None and matches(event.previous)
    if now:
        return ("MODIFIED" if before else "ADDED", event.object)
    if before and event.previous is not None:
        gone = {
            **event.previous,
            "metadata": {
                **event.previous["metadata"],
                "resourceVersion": str(event.resource_version),
            },
        }
        return "DELETED", gone
    return None


def parse_bool(raw: str | None) -> bool:
    """A boolean query parameter as Go's strconv.ParseBool reads it (clients send `True`)."""
    return raw in ("1", "t", "T", "true", "TRUE", "True")


def _line(kind: str, obj: dict[str, Any]) -> bytes:
    return (json.dumps({"type": kind, "object": obj}, separators=(",", ":")) + "\n").encode()


def _int_param(query: dict[str, str], name: str) -> int | None:
    raw = query.get(name)
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError:
        raise bad_request(f"invalid value for {name}: {raw!r}") from None


async def serve_watch(
    request: web.Request,
    *,
    store: Store,
    hub: WatchHub,
    options: WatchOptions,
    rtype: ResourceType,
    namespace: str | None,
) -> web.StreamResponse:
    query = dict(request.query)
    matches = _matcher(rtype, namespace, query)
    timeout = _int_param(query, "timeoutSeconds")
    timeout_s = float(timeout) if timeout is not None and timeout > 0 else options.max_watch_s
    bookmarks = parse_bool(query.get("allowWatchBookmarks"))
    since_text = query.get("resourceVersion", "")
    since = None if since_text in ("", "0") else _int_param(query, "resourceVersion")
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()

    def listener(event: StoreEvent) -> None:
        if event.resource == rtype.key:
            loop.call_soon_threadsafe(queue.put_nowait, event)

    def ask_bookmark(*, final: bool) -> None:
        def enqueue(resource_version: int) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, _Bookmark(resource_version, final))

        store.at_current(enqueue)

    first: list[tuple[str, dict[str, Any]]] = []
    gone: StatusError | None = None
    with store.lock:
        if since is None:
            items, _ = store.objects(rtype, namespace)
            first = [("ADDED", obj) for obj in items if matches(obj)]
            store.subscribe(listener, None)
        else:
            try:
                backlog = store.subscribe(listener, since)
            except StatusError as exc:
                gone = exc
            else:
                first = [
                    seen
                    for e in backlog
                    if e.resource == rtype.key and (seen := _visible(e, matches)) is not None
                ]

    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    hub.add(queue)
    try:
        await response.prepare(request)
        if gone is not None:
            await response.write(_line("ERROR", gone.status()))
            return response
        for kind, obj in first:
            await response.write(_line(kind, obj))
        await _stream(
            response,
            queue,
            matches,
            rtype,
            loop.time() + timeout_s,
            options.bookmark_interval_s if bookmarks else None,
            ask_bookmark,
        )
    except ConnectionResetError:
        pass  # the client went away; nothing to tell it
    finally:
        hub.discard(queue)
        store.unsubscribe(listener)
    return response


async def _stream(
    response: web.StreamResponse,
    queue: asyncio.Queue[Any],
    matches: Callable[[dict[str, Any]], bool],
    rtype: ResourceType,
    deadline: float,
    bookmark_interval_s: float | None,
    ask_bookmark: Callable[..., None],
) -> None:
    loop = asyncio.get_running_loop()
    interval = bookmark_interval_s
    next_bookmark = loop.time() + (interval or 0.0)
    closing = False
    while True:
        if closing:
            item = await queue.get()  # the final bookmark is on its way
        else:
            wake_at = deadline if interval is None else min(deadline, next_bookmark)
            try:
                item = await asyncio.wait_for(queue.get(), max(wake_at - loop.time(), 0.0))
            except TimeoutError:
                if loop.time() < deadline and interval is not None:
                    next_bookmark = loop.time() + interval
                    ask_bookmark(final=False)
                elif interval is None:
                    return
                else:
                    closing = True  # a last bookmark, queued behind every pending event
                    ask_bookmark(final=True)
                continue
        if item is _END:
            return
        if isinstance(item, _Bookmark):
            marker = {
                "kind": rtype.kind,
                "apiVersion": rtype.api_version,
                "metadata": {"resourceVersion": str(item.resource_version)},
            }
            await response.write(_line("BOOKMARK", marker))
            if item.final:
                return
            continue
        seen = _visible(item, matches)
        if seen is not None:
            await response.write(_line(*seen))
