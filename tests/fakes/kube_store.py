"""The fake API server's registry: objects of every type under one resourceVersion counter, a
bounded event history for watches, and the write rules of the real registry (defaulting,
validation, optimistic concurrency, no-op writes, status scoping, graceful deletion, finalizers).

Thread-safe: every method takes `lock` (re-entrant, so a controller can hold it across a read
and the writes that depend on it). Listeners are called under the lock, in resourceVersion
order, and must only hand the event on (e.g. `loop.call_soon_threadsafe`).
"""

from __future__ import annotations

import copy
import random
import string
import threading
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from tests.fakes.kube_errors import (
    StatusError,
    already_exists,
    bad_request,
    conflict,
    expired,
    not_found,
)
from tests.fakes.kube_resources import PODS, ResourceType, now_time
from tests.fakes.kube_strategy import default_object, validate_object, validate_update

__all__ = ["EventType", "Listener", "Store", "StoreEvent"]

# Fields of `metadata` only the server writes; a client's values are ignored on update.
_SERVER_META = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
)
# `metadata` fields a status write cannot change (the real ResetObjectMetaForStatus).
_STATUS_KEEPS_META = ("labels", "annotations", "finalizers", "ownerReferences")


class EventType(StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


@dataclass(frozen=True)
class StoreEvent:
    """One committed write. `object` and `previous` are shared snapshots: never mutate them."""

    type: EventType
    resource: str
    object: dict[str, Any]
    previous: dict[str, Any] | None
    resource_version: int


Listener = Callable[[StoreEvent], None]


def _spec_part(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _comparable(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k != "resourceVersion"}
    return {**obj, "metadata": meta}


class Store:
    """Every object the fake server holds, with its event history."""

    def __init__(self, *, history_size: int) -> None:
        if history_size < 1:
            raise ValueError(f"`history_size` = {history_size}, must be >= 1")
        self.lock = threading.RLock()
        # Start above 0: "0" in a list or watch means "any version", never a real one.
        self._rv = 1
        self._objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
        self._history: deque[StoreEvent] = deque()
        self._history_size = history_size
        # Every event with a resourceVersion above the floor is still in the history.
        self._floor = 1
        self._listeners: list[Listener] = []

    # --- reads -----------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        """The server's latest resourceVersion (that of the last write to any object)."""
        with self.lock:
            return self._rv

    @property
    def oldest_watchable(self) -> int:
        """The lowest resourceVersion a watch may still start from."""
        with self.lock:
            return self._floor

    def get(self, rtype: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        with self.lock:
            found = self._bucket(rtype).get((namespace or "", name))
            if found is None:
                raise not_found(rtype.plural, rtype.group, name)
            return copy.deepcopy(found)

    def find(self, rtype: ResourceType, namespace: str | None, name: str) -> dict[str, Any] | None:
        with self.lock:
            found = self._bucket(rtype).get((namespace or "", name))
            return copy.deepcopy(found) if found is not None else None

    def objects(
        self, rtype: ResourceType, namespace: str | None
    ) -> tuple[list[dict[str, Any]], int]:
        """Deep copies of the objects (in one namespace, or all when None), sorted by
        (namespace, name), and the resourceVersion they are current at."""
        with self.lock:
            items = [
                copy.deepcopy(obj)
                for (ns, _), obj in sorted(self._bucket(rtype).items())
                if namespace is None or ns == namespace
            ]
            return items, self._rv

    def all_objects(self) -> list[tuple[str, dict[str, Any]]]:
        """(resource key, snapshot) for every stored object: the garbage collector's view."""
        with self.lock:
            return [(key, obj) for key, bucket in self._objects.items() for obj in bucket.values()]

    # --- writes ----------------------------------------------------------------------------

    def create(
        self, rtype: ResourceType, namespace: str | None, obj: dict[str, Any]
    ) -> dict[str, Any]:
        with self.lock:
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            if not isinstance(meta, dict):
                raise bad_request("metadata must be an object")
            if rtype.namespaced:
                meta["namespace"] = namespace
            else:
                meta.pop("namespace", None)
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = self._generate_name(rtype, namespace, str(meta["generateName"]))
            if not meta.get("name"):
                raise StatusError(
                    422,
                    "Invalid",
                    f'{rtype.kind} "" is invalid: metadata.name: '
                    "Required value: name or generateName is required",
                )
            if meta.get("resourceVersion"):
                raise bad_request("resourceVersion should not be set on objects to be created")
            obj["apiVersion"], obj["kind"] = rtype.api_version, rtype.kind
            default_object(rtype, obj)
            validate_object(rtype, obj)
            key = (namespace or "", meta["name"])
            if key in self._bucket(rtype):
                raise already_exists(rtype.plural, rtype.group, meta["name"])
            for field in ("deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
                meta.pop(field, None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_time()
            if rtype.has_generation:
                meta["generation"] = 1
            return self._commit(EventType.ADDED, rtype, key, obj, None)

    def update(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        mutate: Callable[[dict[str, Any]], Any],
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """Replace an object with `mutate(copy of current)`: a stale `metadata.resourceVersion`
        in the result is a 409; a result equal to the current object writes nothing."""
        with self.lock:
            key = (namespace or "", name)
            current = self._bucket(rtype).get(key)
            if current is None:
                raise not_found(rtype.plural, rtype.group, name)
            new = mutate(copy.deepcopy(current))
            new = self._scoped(rtype, current, new, subresource)
            if subresource is None:
                validate_object(rtype, new)
                validate_update(rtype, current, new)
            if _comparable(new) == _comparable(current):
                return copy.deepcopy(current)
            if rtype.has_generation and _spec_part(new) != _spec_part(current):
                new["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
            meta = new["metadata"]
            if (
                meta.get("deletionTimestamp")
                and not meta.get("finalizers")
                and not meta.get("deletionGracePeriodSeconds")
            ):
                return self._remove(rtype, key, new)
            return self._commit(EventType.MODIFIED, rtype, key, new, current)

    def delete(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        *,
        grace_s: int | None = None,
        preconditions: Mapping[str, Any] | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Delete as the real registry does; returns (object, removed now).

        A pod bound to a node is deleted gracefully: it gets `deletionTimestamp` (= now + grace)
        and `deletionGracePeriodSeconds`, and stays until its kubelet deletes it again with
        grace 0. An object with finalizers stays, marked, until an update empties them.
        """
        with self.lock:
            key = (namespace or "", name)
            current = self._bucket(rtype).get(key)
            if current is None:
                raise not_found(rtype.plural, rtype.group, name)
            self._check_preconditions(rtype, current, preconditions or {})
            grace = self._grace(rtype, current, grace_s)
            meta = current["metadata"]
            if not grace and not meta.get("finalizers"):
                return self._remove(rtype, key, current), True
            pending = meta.get("deletionGracePeriodSeconds")
            if meta.get("deletionTimestamp") and pending is not None and pending <= grace:
                return copy.deepcopy(current), False
            new = copy.deepcopy(current)
            when = datetime.now(UTC) + timedelta(seconds=grace)
            new["metadata"]["deletionTimestamp"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
            new["metadata"]["deletionGracePeriodSeconds"] = grace
            return self._commit(EventType.MODIFIED, rtype, key, new, current), False

    def compact(self) -> None:
        """Forget the whole event history: a watch from any older resourceVersion gets 410."""
        with self.lock:
            self._history.clear()
            self._floor = self._rv

    # --- watch -----------------------------------------------------------------------------

    def subscribe(self, listener: Listener, since: int | None) -> list[StoreEvent]:
        """Register `listener` for every later write; return the retained events after
        `since` (none when None). 410 Expired when `since` is older than the history."""
        with self.lock:
            backlog: list[StoreEvent] = []
            if since is not None:
                if since < self._floor:
                    raise expired(f"too old resource version: {since} ({self._floor})")
                backlog = [event for event in self._history if event.resource_version > since]
            self._listeners.append(listener)
            return backlog

    def unsubscribe(self, listener: Listener) -> None:
        with self.lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def at_current(self, action: Callable[[int], None]) -> None:
        """Run `action(resourceVersion)` under the lock, ordered after every event so far."""
        with self.lock:
            action(self._rv)

    # --- internals -------------------------------------------------------------------------

    def _bucket(self, rtype: ResourceType) -> dict[tuple[str, str], dict[str, Any]]:
        return self._objects.setdefault(rtype.key, {})

    def _generate_name(self, rtype: ResourceType, namespace: str | None, prefix: str) -> str:
        alphabet = string.ascii_lowercase + string.digits
        while True:
            name = prefix + "".join(random.choices(alphabet, k=5))
            if (namespace or "", name) not in self._bucket(rtype):
                return name

    def _scoped(
        self, rtype: ResourceType, current: dict[str, Any], new: Any, subresource: str | None
    ) -> dict[str, Any]:
        if not isinstance(new, dict) or not isinstance(new.get("metadata", {}), dict):
            raise bad_request(f"the body must be a {rtype.kind} object")
        meta, old_meta = new.setdefault("metadata", {}), current["metadata"]
        sent = meta.get("resourceVersion")
        if sent not in (None, "") and str(sent) != old_meta["resourceVersion"]:
            raise conflict(rtype.plural, rtype.group, old_meta["name"])
        if meta.get("uid") not in (None, "", old_meta["uid"]):
            raise conflict(
                rtype.plural,
                rtype.group,
                old_meta["name"],
                f"Precondition failed: UID in precondition: {meta['uid']}, "
                f"UID in object meta: {old_meta['uid']}",
            )
        for field in ("name", "namespace"):
            if meta.get(field) not in (None, old_meta.get(field)):
                raise bad_request(
                    f"the {field} of the object ({meta[field]}) does not match "
                    f"the {field} on the URL ({old_meta.get(field)})"
                )
        if subresource == "binding":
            return new  # written by the server itself (spec.nodeName and PodScheduled)
        if subresource == "status":
            scoped = copy.deepcopy(current)
            scoped["status"] = new.get("status")
            return scoped
        new["apiVersion"], new["kind"] = current["apiVersion"], current["kind"]
        for field in ("name", "namespace", *_SERVER_META):
            if field in old_meta:
                meta[field] = old_meta[field]
            else:
                meta.pop(field, None)
        if "status" in rtype.subresources:
            if "status" in current:
                new["status"] = current["status"]
            else:
                new.pop("status", None)
        return new

    def _check_preconditions(
        self, rtype: ResourceType, current: dict[str, Any], preconditions: Mapping[str, Any]
    ) -> None:
        meta = current["metadata"]
        for field, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            wanted = preconditions.get(field)
            if wanted not in (None, "") and str(wanted) != meta[field]:
                raise conflict(
                    rtype.plural,
                    rtype.group,
                    meta["name"],
                    f"Precondition failed: {label} in precondition: {wanted}, "
                    f"{label} in object meta: {meta[field]}",
                )

    @staticmethod
    def _grace(rtype: ResourceType, current: dict[str, Any], grace_s: int | None) -> int:
        if rtype is not PODS:
            return 0
        spec, status = current.get("spec") or {}, current.get("status") or {}
        # An unscheduled or finished pod has no kubelet to wait for: it goes at once.
        if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
            return 0
        grace = spec.get("terminationGracePeriodSeconds", 30) if grace_s is None else grace_s
        return max(int(grace), 0)

    def _remove(
        self, rtype: ResourceType, key: tuple[str, str], obj: dict[str, Any]
    ) -> dict[str, Any]:
        previous = self._bucket(rtype).pop(key)
        gone = copy.deepcopy(obj)
        self._rv += 1
        gone["metadata"]["resourceVersion"] = str(self._rv)
        self._record(StoreEvent(EventType.DELETED, rtype.key, gone, previous, self._rv))
        return copy.deepcopy(gone)

    def _commit(
        self,
        kind: EventType,
        rtype: ResourceType,
        key: tuple[str, str],
        obj: dict[str, Any],
        previous: dict[str, Any] | None,
    ) -> dict[str, Any]:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        self._bucket(rtype)[key] = obj
        self._record(StoreEvent(kind, rtype.key, obj, previous, self._rv))
        return copy.deepcopy(obj)

    def _record(self, event: StoreEvent) -> None:
        self._history.append(event)
        if len(self._history) > self._history_size:
            self._floor = self._history.popleft().resource_version
        for listener in list(self._listeners):
            listener(event)
