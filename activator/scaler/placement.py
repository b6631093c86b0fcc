"""Where a shared model's replica goes: bin-packing onto running replicas by budget, evicting
the least recently used idle model when room is needed, and releasing empty replicas: pure.

A *host* is one running runtime (a local process, a pod) that serves several models, each a
*resident* costing bytes of its budget (host memory on CPU: the model's image plus a measured
per-model overhead; on GPU the device plan's VRAM). Every decision takes `now` and returns a
value; nothing here does I/O, so the stories in its tests run on a stepped clock.

    place(need, hosts, now, peers)
                              a host holds a peer? only those hosts: fits, evict, else the
                                │ no               roomiest, over budget      PlaceOn(host)
                              fits ─▶ best fit (least room left after it)         PlaceOn(host)
                                │ none
                              evict ─▶ LRU idle residents until it fits,
                                │      fewest bytes evicted wins              PlaceOn(host, evict)
                                │ none
                              start ─▶ a new host (budget: max(its own, need))            NewHost
    due_for_release(hosts, now)  hosts empty for a whole grace: release them

A model's own replicas spread: a host that already holds the model is never chosen for a
second replica of it. A model with *peers* (models it must run beside: with `--rate-limit`,
those naming a rate-limiter resource it names, so that one limiter counts them all) goes to a
host that holds one of them whenever there is one, by the same fit-then-evict order; when
none of those has room even after evictions, it goes to the one with the most room anyway,
over its budget (`PlaceOn.over_budget`): the resource's count is the operator's rule, the
budget only an estimate. An *idle* resident has nothing in flight, nothing held, and no request
for `grace_s`; only idle residents are ever evicted, so a busy model never loses its replica
to another model's wake (that one gets a new host instead).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from activator.config import Placement

__all__ = [
    "Host",
    "NewHost",
    "PlaceOn",
    "Placement",
    "Resident",
    "due_for_release",
    "idle_residents",
    "place",
]


@dataclass(frozen=True)
class Resident:
    """One model loaded on a host: `nbytes` of its budget, its load now (`in_flight`
    requests on this host, `held` requests waiting for any replica of the model) and
    `last_used_at`, its last request or its load (the caller's monotonic clock). A `pinned`
    model (`thaw.min_replicas` > 0) never goes to zero, so it is never evicted either: its
    autoscaler would bring it straight back, evicting another."""

    model: str
    nbytes: int
    in_flight: int = 0
    held: int = 0
    last_used_at: float = 0.0
    pinned: bool = False

    def idle(self, now: float, grace_s: float) -> bool:
        """Not pinned, nothing in flight or held, and no request for `grace_s`: may be
        evicted."""
        busy = self.pinned or self.in_flight or self.held
        return not busy and now - self.last_used_at >= grace_s


@dataclass(frozen=True)
class Host:
    """One running runtime shared by models: `budget_bytes` in all, its `residents`, and
    `reserved_bytes` promised to the loads in progress of the models in `loading` (counted as
    used and as held, so two wakes at once can neither take the same room nor put one model
    twice in one runtime). `empty_since` is when its last resident left (None while it has
    residents or reservations)."""

    id: str
    budget_bytes: int
    residents: tuple[Resident, ...] = ()
    reserved_bytes: int = 0
    empty_since: float | None = None
    loading: tuple[str, ...] = ()

    @property
    def used_bytes(self) -> int:
        return sum(r.nbytes for r in self.residents) + self.reserved_bytes

    @property
    def free_bytes(self) -> int:
        return self.budget_bytes - self.used_bytes

    def holds(self, model: str) -> bool:
        """The model is loaded here, or being loaded."""
        return model in self.loading or any(r.model == model for r in self.residents)


@dataclass(frozen=True)
class PlaceOn:
    """Load the model on host `host`, after unloading the models in `evict` (oldest first);
    `over_budget`: beside its peers though the host has no room for it."""

    host: str
    evict: tuple[str, ...] = ()
    over_budget: bool = False


@dataclass(frozen=True)
class NewHost:
    """Start a host for the model, of `budget_bytes` (the model alone may exceed the usual
    budget: it then gets a host of its own size); `reason` says why no running one would do."""

    budget_bytes: int
    reason: str


def idle_residents(host: Host, now: float, grace_s: float) -> list[Resident]:
    """The host's idle residents, least recently used first: the eviction order."""
    idle = [r for r in host.residents if r.idle(now, grace_s)]
    return sorted(idle, key=lambda r: (r.last_used_at, r.model))


def place(
    model: str,
    need_bytes: int,
    hosts: Iterable[Host],
    *,
    now: float,
    grace_s: float,
    budget_bytes: int,
    peers: Collection[str] = (),
) -> PlaceOn | NewHost:
    """Where a new replica of `model`, costing `need_bytes`, goes.

    `budget_bytes` is a new host's budget; `grace_s` how long a resident must have been
    without requests before it may be evicted; `peers` the models it must run beside when a
    host holds one. Ties break by host id, so a decision is the same for the same inputs.
    """
    if need_bytes < 0:
        raise ValueError(f"need_bytes = {need_bytes}, must be >= 0")
    candidates = sorted((h for h in hosts if not h.holds(model)), key=lambda h: h.id)
    beside = [h for h in candidates if any(h.holds(peer) for peer in peers)]
    if beside:
        return _beside_peers(need_bytes, beside, now, grace_s)
    return _anywhere(need_bytes, candidates, now=now, grace_s=grace_s, budget_bytes=budget_bytes)


def _beside_peers(need_bytes: int, hosts: Sequence[Host], now: float, grace_s: float) -> PlaceOn:
    """Of `hosts` (each holding a peer), one with room, else one with room after evictions,
    else the one with the most room, over its budget."""
    choice = _fit_or_evict(need_bytes, hosts, now, grace_s)
    if choice is not None:
        return choice
    roomiest = max(hosts, key=lambda h: h.free_bytes)  # the first of a tie: the lowest id
    return PlaceOn(roomiest.id, over_budget=True)


def _anywhere(
    need_bytes: int, candidates: Sequence[Host], *, now: float, grace_s: float,
    budget_bytes: int,
) -> PlaceOn | NewHost:  # fmt: skip
    """Of `candidates`, one with room, else one with room after evictions, else a new host."""
    choice = _fit_or_evict(need_bytes, candidates, now, grace_s)
    if choice is not None:
        return choice
    if need_bytes > budget_bytes:
        reason = f"needs {need_bytes} bytes, more than a replica's budget of {budget_bytes}"
        return NewHost(need_bytes, reason)
    reason = "no running replica has room" if candidates else "no running replica to share"
    return NewHost(budget_bytes, reason)


def _fit_or_evict(
    need_bytes: int, candidates: Sequence[Host], now: float, grace_s: float
) -> PlaceOn | None:
    """The best fit of `candidates` (sorted by id), else the one whose eviction of its LRU
    idle residents frees the fewest bytes; None when neither."""
    fitting = [h for h in candidates if h.free_bytes >= need_bytes]
    if fitting:
        best = min(fitting, key=lambda h: h.free_bytes - need_bytes)
        return PlaceOn(best.id)
    evicting = [p for p in (_by_eviction(h, need_bytes, now, grace_s) for h in candidates) if p]
    if evicting:
        _freed, place_on = min(evicting, key=lambda p: (p[0], len(p[1].evict)))
        return place_on
    return None


def _by_eviction(
    host: Host, need_bytes: int, now: float, grace_s: float
) -> tuple[int, PlaceOn] | None:
    """The fewest LRU idle residents whose eviction makes room on `host` (with the bytes
    they free), or None when even evicting every idle one would not."""
    free = host.free_bytes
    evicted: list[Resident] = []
    for resident in idle_residents(host, now, grace_s):
        if free >= need_bytes:
            break
        evicted.append(resident)
        free += resident.nbytes
    if free < need_bytes:
        return None
    return sum(r.nbytes for r in evicted), PlaceOn(host.id, tuple(r.model for r in evicted))


def due_for_release(hosts: Sequence[Host], *, now: float, grace_s: float) -> list[str]:
    """Hosts with no resident and no load in progress for `grace_s`: stop them (the host
    tier keeps their models' images, so a later wake is still a copy from memory)."""
    return [
        h.id
        for h in hosts
        if not h.residents
        and h.reserved_bytes == 0
        and h.empty_since is not None
        and now - h.empty_since >= grace_s
    ]
