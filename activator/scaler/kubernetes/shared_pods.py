"""The scaling leader's shared placement on Kubernetes: decide with the local scaler's policy,
book the room on the pod with a patch conditional on its resourceVersion, evict through the
runtime's model control, and say which shared pods are due for release.

    place(model, need, use) ─▶ list the shared pods (a fresh read, not the watch's cache)
                             ─▶ place_spread(...)             NewHost ─▶ returned: the caller
                                │ PlaceOn(pod, evict)                     claims a pool pod and
                                ▼                                         `open`s its booking
                             booking patch at the resourceVersion read ─▶ Booked
                                │ 409 Conflict: another activator booked this pod first
                                └▶ read again, place again (at most `max_attempts` times)
    evict(booked)            ─▶ unload each evicted model on the pod (`RuntimeControl.unload`);
                                its image stays in the node's host tier
    unbook(pod, model)       ─▶ the model left the pod (scaled to zero): its room is free
    releasable(now)          ─▶ shared pods booked empty for `release_grace_s`

Two activators never over-book a pod: each booking is a merge patch carrying the
resourceVersion its decision was made from, so the API server applies exactly one of two
bookings made from the same read. Only the scaling leader places, but a leader change may
overlap the old leader's last booking; that is the race the resourceVersion settles
(docs/decisions/0022-shared-placement-on-kubernetes.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import aiohttp

from activator.errors import ActivationFailed
from activator.scaler.kube_config import DEFAULT_CLASS
from activator.scaler.kubernetes.api import KubeApi, KubeApiError
from activator.scaler.kubernetes.pod_budget import (
    ModelUse,
    PodLoad,
    booking_patch,
    host_of,
    load_of,
    node_of,
    place_spread,
)
from activator.scaler.kubernetes.pod_memory import memory_limit, shared_budget
from activator.scaler.kubernetes.pod_state import (
    Pod,
    is_deleting,
    is_finished,
    name_of,
    runtime_url,
)
from activator.scaler.placement import Host, NewHost, due_for_release
from activator.scaler.runtime_control import RuntimeControl

__all__ = ["Booked", "SharedPods"]

logger = logging.getLogger(__name__)

_CONFLICT = 409


@dataclass(frozen=True)
class Booked:
    """Room booked for `model` on pod `pod` (runtime at `url`), after `evict` leave it;
    `conflicts`: how many bookings lost to another activator on the way here."""

    pod: str
    model: str
    url: str | None
    evict: tuple[str, ...] = ()
    conflicts: int = 0


class SharedPods:
    """The shared pods that `selector` matches in one namespace, as the scaling leader books
    them. `budget_bytes` is a new shared pod's budget, `grace_s` how long a model must have
    been without requests to be evicted, `release_grace_s` how long a pod must be booked
    empty to be released; `clock` is monotonic (injected: tests step it)."""

    def __init__(
        self,
        api: KubeApi,
        selector: str,
        *,
        budget_bytes: int,
        grace_s: float,
        release_grace_s: float,
        runtime_port: int | None,
        clock: Callable[[], float] = time.monotonic,
        max_attempts: int = 8,
    ) -> None:
        self._api = api
        self._selector = selector
        self._budget_bytes = budget_bytes
        self._grace_s = grace_s
        self._release_grace_s = release_grace_s
        self._runtime_port = runtime_port
        self._clock = clock
        self._max_attempts = max_attempts
        self._empty_since: dict[str, float] = {}  # pod -> when it was first read empty

    async def place(
        self,
        model: str,
        need_bytes: int,
        use: Mapping[str, ModelUse],
        *,
        placement_class: str = DEFAULT_CLASS,
    ) -> Booked | NewHost:
        """Book `need_bytes` for `model` on a shared pod of `placement_class`, or say a new
        one is needed."""
        conflicts = 0
        for _ in range(self._max_attempts):
            pods = {
                name: (pod, load)
                for name, (pod, load) in (await self._read()).items()
                if load.placement_class == placement_class
            }
            now = self._clock()
            hosts = [(self._host(pod, load, use, now), node_of(pod)) for pod, load in pods.values()]
            decision = place_spread(
                model, need_bytes, hosts, now=now, grace_s=self._grace_s,
                budget_bytes=self._budget_bytes,
            )  # fmt: skip
            if isinstance(decision, NewHost):
                return decision
            pod, load = pods[decision.host]
            try:
                await self._book(pod, load.booked(model, need_bytes, evict=decision.evict))
            except KubeApiError as exc:
                if exc.status != _CONFLICT:
                    raise
                conflicts += 1  # another activator booked this pod since our read
                logger.info(
                    "shared pod %s model=%s: booking lost to another activator, placing again",
                    decision.host, model,
                )  # fmt: skip
                continue
            url = runtime_url(pod, self._runtime_port)
            self._empty_since.pop(decision.host, None)
            return Booked(decision.host, model, url, decision.evict, conflicts)
        raise ActivationFailed(
            f"model '{model}': every shared pod's booking conflicted {self._max_attempts} "
            "times in a row"
        )

    async def open(
        self,
        pod: Pod,
        model: str,
        need_bytes: int,
        *,
        own_bytes: int | None = None,
        device_room_bytes: int | None = None,
        placement_class: str = DEFAULT_CLASS,
    ) -> Booked:
        """The first booking on `pod`, a pool pod of `placement_class` the caller claimed
        and loaded `model` into after `place` said NewHost: its budget is the usual one,
        capped by the runtime container's memory limit less `own_bytes` (what the runtime
        holds of its own: pod_memory) and by `device_room_bytes` (on a GPU pod: the device
        memory its models may take, `device_room`), and never below the model's own size (it
        is loaded already). Its own writes (the `serving` mark) may move its resourceVersion
        meanwhile: a conflict re-reads it and books again."""
        name = name_of(pod)
        budget = shared_budget(self._budget_bytes, memory_limit(pod), own_bytes)
        if budget < self._budget_bytes:
            logger.info(
                "shared pod %s: budget %d MiB (its memory limit less the runtime's own %d MiB)",
                name, budget >> 20, (own_bytes or 0) >> 20,
            )  # fmt: skip
        if device_room_bytes is not None and device_room_bytes < budget:
            budget = device_room_bytes
            logger.info("shared pod %s: budget %d MiB (its GPU memory)", name, budget >> 20)
        load = PodLoad(max(budget, need_bytes), placement_class=placement_class)
        load = load.booked(model, need_bytes)
        for _ in range(self._max_attempts):
            try:
                await self._book(pod, load)
            except KubeApiError as exc:
                if exc.status != _CONFLICT:
                    raise
                pod = await self._read_pod(name)
                continue
            return Booked(name, model, runtime_url(pod, self._runtime_port))
        raise ActivationFailed(f"shared pod {name}: booking model '{model}' kept conflicting")

    async def evict(
        self, booked: Booked, session: aiohttp.ClientSession, *, timeout_s: float
    ) -> None:
        """Unload the models `booked` evicted from its pod that are still loaded there (their
        own scale to zero may have unloaded them first; their bookings are gone already: the
        room is the new model's). `ActivationFailed` when the runtime refuses one: the
        caller then retires the pod rather than load into memory that was not freed."""
        if not booked.evict:
            return
        if booked.url is None:
            raise ActivationFailed(f"shared pod {booked.pod} has no address to unload from")
        control = RuntimeControl(session, booked.url, name=booked.pod)
        for victim in booked.evict:
            if not await control.model_ready(victim):
                continue
            await control.unload(victim, timeout_s=timeout_s)
            logger.info("shared pod %s model=%s: evicted (for %s)", booked.pod, victim,
                        booked.model)  # fmt: skip

    async def unbook(self, pod_name: str, model: str) -> bool:
        """Free `model`'s room on `pod_name` (it went to zero there); False when the pod or
        the booking is gone already. Re-read and retried on conflict."""
        for _ in range(self._max_attempts):
            found = (await self._read()).get(pod_name)
            if found is None or model not in found[1].models:
                return False
            pod, load = found
            try:
                await self._book(pod, load.without(model))
            except KubeApiError as exc:
                if exc.status != _CONFLICT:
                    raise
                continue
            return True
        raise ActivationFailed(f"shared pod {pod_name}: unbooking model '{model}' kept conflicting")

    async def releasable(self) -> list[str]:
        """The shared pods booked empty for `release_grace_s` (the host tier keeps their
        models' images): the caller deletes them."""
        now = self._clock()
        pods = await self._read()
        hosts = [self._host(pod, load, {}, now) for pod, load in pods.values()]
        return due_for_release(hosts, now=now, grace_s=self._release_grace_s)

    # ---- reading and writing bookings ---------------------------------------------------

    async def _read(self) -> dict[str, tuple[Pod, PodLoad]]:
        """Every live shared pod with its booking, read from the API server now (a booking
        is decided from the resourceVersion it is written at: never from a stale cache)."""
        items, _version = await self._api.list_pods(self._selector)
        found: dict[str, tuple[Pod, PodLoad]] = {}
        for pod in items:
            if is_deleting(pod) or is_finished(pod):
                continue
            try:
                load = load_of(pod)
            except ValueError as exc:
                logger.warning("shared pod %s left alone: %s", name_of(pod), exc)
                continue
            if load is not None:
                found[name_of(pod)] = (pod, load)
        for gone in set(self._empty_since) - set(found):
            del self._empty_since[gone]
        return found

    async def _read_pod(self, name: str) -> Pod:
        items, _version = await self._api.list_pods(self._selector)
        for pod in items:
            if name_of(pod) == name and not is_deleting(pod) and not is_finished(pod):
                return pod
        raise ActivationFailed(f"shared pod {name} is gone")

    def _host(self, pod: Pod, load: PodLoad, use: Mapping[str, ModelUse], now: float) -> Host:
        name = name_of(pod)
        if load.models:
            self._empty_since.pop(name, None)
            empty_since = None
        else:
            empty_since = self._empty_since.setdefault(name, now)
        return host_of(pod, load, use, now=now, empty_since=empty_since)

    async def _book(self, pod: Pod, load: PodLoad) -> None:
        await self._api.patch_pod(name_of(pod), booking_patch(pod, load))
