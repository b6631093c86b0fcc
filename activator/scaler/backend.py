"""The seam between a model endpoint and wherever its replicas run: the ScalerBackend Protocol.

    ModelEndpoint (how many replicas, which one serves a request)
          │ start_replica / wait_lost / stop_replica / running_replicas / pool_status
          ▼
    ScalerBackend ── local_backend.LocalBackend (child processes + warm pool, `--scaler local`)
                 └── kubernetes_backend.KubernetesBackend (warm-pool pods claimed, readiness
                     probed, a Lease for the scaling leader; `--scaler kubernetes`)

The endpoint decides *how many* replicas a model has and drains them; a backend makes them
exist, says when one is lost, and stops them. Every backend brings a replica up the same way
once it has a running runtime: `runtime_control.RuntimeControl` waits for readiness and loads
the model over the runtime's HTTP API. All methods run on the event loop of `thaw up`.

Optional capabilities a backend may add (checked with `isinstance`): `AsyncLifecycle` (async
set-up before the first call, and letting go of replicas that outlive the activator before
the endpoints drain), `PeerConcurrency` (the same model's concurrency on the other
activators, for active-active activators) and `NodeWait` (a start that waits for a node to be
provisioned holds requests past the activation timeout, and says so) and `SharedPlacement`
(models whose `thaw.placement` is `shared` get room in runtimes they share with other models,
and idle ones are evicted to make room: activator.scaler.placement) and `SharedLoadState`
(explicit mode's load state kept where every activator of the fleet reads and writes it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable

__all__ = [
    "AsyncLifecycle",
    "LoadParameters",
    "ModelActivity",
    "NodeWait",
    "PeerConcurrency",
    "PeerLoad",
    "PoolReport",
    "PoolStatus",
    "ReplicaHandle",
    "ScalerBackend",
    "ScalerKind",
    "SharedCounts",
    "SharedLoadState",
    "SharedPlacement",
    "SharedReplicaStatus",
]


class ScalerKind(StrEnum):
    """Where replicas run: the `--scaler` choice of `thaw up`."""

    LOCAL = "local"  # `thaw serve` child processes on this machine
    KUBERNETES = "kubernetes"  # warm-pool pods in a namespace (kubernetes-asyncio)


@dataclass(frozen=True)
class ReplicaHandle:
    """One replica a backend brought up: who it is, where it answers, how it came up.

    Identity: `id` is unique among the backend's replicas for its whole life (a local
    `<model>-<n>`; a pod's name) and is what the endpoint passes back to `wait_lost` and
    `stop_replica`; `model` is the one model it serves. Address: `url` is the base URL of its
    KServe v2 HTTP surface (`http://host:port`, no trailing slash), where the activator proxies
    requests and reads statistics. Lifecycle: the replica is routable from the moment the
    handle is returned (its load call returned 200) until `stop_replica` or `wait_lost`;
    `claim_s` is the time to get a running, ready runtime (warm-pool claim or fresh start) and
    `restore_s` the load call (restore from an image, or the model's normal load), both 0 for a
    replica found running (`running_replicas`). `pid` is the local process id, when there is
    one (shown by `thaw status --json`). `grpc_address` is its KServe v2 gRPC service
    (`host:port`, gRPC's target form), where the activator forwards gRPC calls; None when the
    replica serves no gRPC (gRPC calls for the model then fail UNAVAILABLE, saying so).
    `warmup_s` is the part of `restore_s` the model's
    `model_warmup` samples took (the runtime reports it in its load answer). `host` names the
    shared runtime when the replica is one model's room in it (several handles, one process).
    """

    id: str
    model: str
    url: str
    claim_s: float
    restore_s: float
    pid: int | None = None
    grpc_address: str | None = None
    warmup_s: float = 0.0
    # A shared replica (`thaw.placement` shared): the id of the runtime it shares with other
    # models (`url` and `pid` are that runtime's); None for a replica of its own.
    host: str | None = None


@dataclass(frozen=True)
class PoolStatus:
    """A backend's warm pool: `size` runtimes it keeps idle and ready now, `ready` of them
    idle and ready, `starting` on their way.

    The rest is what a pool that measures itself reports (defaults otherwise): `source`, where
    its processes come from ("fork-server" or "spawn"); `idle_pss_bytes`, the proportional set
    size of each idle process (shared framework pages divided among the processes sharing
    them); `server_pss_bytes`, the fork server's; `budget_bytes`, the memory budget
    (`--pool-memory-bytes`); `demand`, models woken within the policy's window; `limit`, what
    set `size` (activator.scaler.local.pool_policy.Limit); `last_start_s`, the last process's start
    -> ready (with a fork server: fork -> ready); `starts`, processes started so far;
    `failures`, starts that failed in a row.
    """

    size: int
    ready: int
    starting: int = 0
    source: str = ""
    idle_pss_bytes: tuple[int, ...] = ()
    server_pss_bytes: int | None = None
    budget_bytes: int | None = None
    demand: int = 0
    limit: str = ""
    last_start_s: float | None = None
    starts: int = 0
    failures: int = 0


class PoolReport(Protocol):
    """What the status document shows of a backend's warm pool (`thaw status`)."""

    def pool_status(self) -> PoolStatus:
        """The pool now; a backend without a pool answers `PoolStatus(size=0, ready=0)`.
        Cheap and synchronous: it is read for every `GET /thaw/status`."""
        ...


class ScalerBackend(PoolReport, Protocol):
    """Runs replicas. The model endpoint decides how many; the backend makes them exist.

    Callers: only `activator.endpoint.replica_lifecycle.ReplicaSet` (one per model) calls these,
    from the event loop, never concurrently for the same replica id; `close` is called once, by the
    fleet, after every endpoint closed.

    Errors: a replica that cannot be brought up is `ActivationFailed` with a message a user
    can act on (it becomes the model's `last_error` and the held requests' 503). A backend
    translates its own failures (OSError, HTTP errors, API errors) into that, once, with
    `raise ... from exc`; anything else escaping `start_replica` is treated as a bug.

    Deadlines and cancellation: every wait is bounded by a deadline the caller passes or the
    backend's config sets. Each coroutine may be cancelled (the activator shutting down, a
    client gone); a cancelled `start_replica` must give back what it claimed (stop the process,
    return or delete the pod) before re-raising `CancelledError`, so that nothing runs that
    no endpoint knows of.
    """

    async def start_replica(self, model: str, *, timeout_s: float) -> ReplicaHandle:
        """Bring up one replica serving `model` and return once it is routable.

        Within `timeout_s` (the model's `load_timeout_s`, claim + ready + load together:
        `ScaleSettings.start_timeout_s`) or
        raise `ActivationFailed`. The endpoint calls it once per replica it wants, possibly
        several concurrently for one model; each call returns a distinct replica.
        """
        ...

    async def running_replicas(self, model: str) -> list[ReplicaHandle]:
        """Replicas of `model` that already run and serve when `thaw up` starts (a backend
        whose replicas outlive the activator finds them again, e.g. pods by label), for the
        endpoint to adopt instead of starting new ones. Called once per model before the
        first scaling decision; a backend whose replicas die with the activator returns []."""
        ...

    async def wait_lost(self, replica_id: str) -> str:
        """Return, with a reason for the log and `last_error`, when the replica ends without
        being asked to (process exit, pod gone, readiness lost for good). Waits as long as the
        replica lives (no deadline); cancelled when the endpoint closes. Returns at once for
        an id it does not know (already stopped)."""
        ...

    async def stop_replica(self, replica_id: str, *, timeout_s: float) -> None:
        """Stop a replica the endpoint has drained (no request in flight through the
        activator): ask it to stop gracefully, wait up to `timeout_s`, then force it; always
        releases its resources. Idempotent; an unknown id is a no-op."""
        ...

    async def close(self) -> None:
        """Stop every replica and pooled runtime this backend started (bounded by its own
        drain timeout); nothing it started runs afterwards."""
        ...


@runtime_checkable
class AsyncLifecycle(Protocol):
    """A backend that sets itself up on the event loop, and whose replicas outlive it."""

    async def start(self) -> None:
        """Connect and get ready (called once by the fleet, before `running_replicas`);
        raises `ScalerUnavailable` with a message an operator can act on (unreachable API,
        missing rights, no warm pool), which stops `thaw up` at start."""
        ...

    async def release(self) -> None:
        """Shutdown, called by the fleet before the endpoints drain: stop owning replicas
        (hand over any leadership), so the drains' `stop_replica` calls only let go of them
        and they keep serving other activators or the next one started."""
        ...


@dataclass(frozen=True)
class PeerLoad:
    """One model's concurrency on the *other* activators: `mean` in-flight + held requests
    over their last report period, `current` now (a held request there counts)."""

    mean: float = 0.0
    current: int = 0


@runtime_checkable
class PeerConcurrency(Protocol):
    """Where several activators serve one fleet (Kubernetes, active-active), the concurrency
    the others see: the scaling leader scales on the total, and every activator attaches to as
    many replicas as the total needs. A backend without peers does not implement this."""

    def exchange(self, model: str, *, mean: float, current: int) -> PeerLoad:
        """Record this activator's concurrency of `model` (`mean` since its last tick, `current`
        now) for the others, and return theirs. Cheap and synchronous (every tick and poke)."""
        ...

    def watch_demand(self, model: str, wake: Callable[[], object]) -> None:
        """Call `wake()` when demand for `model` appears on another activator (a request held
        there while this one scales), so the scaling leader decides at once, not next tick."""
        ...

    def forget_demand(self, model: str) -> None:
        """`model` was unloaded: drop what the others last said of it. Their requests for it
        are refused from the unload on, so a report from before it is stale (it started a
        replica for the unloaded model, kept for its idle grace); their next reports say
        their load afresh."""
        ...


@runtime_checkable
class NodeWait(Protocol):
    """A backend whose replica start may wait for a node to be provisioned (Kubernetes: the
    pod is Pending, Unschedulable, until a node autoscaler such as Karpenter adds a node).
    Such a start may outlast the activation timeout; held requests wait for it."""

    def waiting_for_node(self, model: str) -> bool:
        """A start of `model` waits for a node now (the status says "waiting for a node")."""
        ...

    def hold_until(self, model: str) -> float | None:
        """Until when (the backend's clock, `time.monotonic` in `thaw up`) requests held for
        `model` may wait, past their activation timeout, for a start that waited or waits for
        a node; None when no such start is in progress. Cheap and synchronous."""
        ...


@runtime_checkable
class LoadParameters(Protocol):
    """A backend whose replicas can load a model with a repository load's `parameters`
    (Triton's `config` and `file:` overrides, as `thaw serve` takes them in its load call):
    `thaw up` serves a model loaded with an override through such a backend only."""

    def set_load_parameters(self, model: str, parameters: Mapping[str, str] | None) -> None:
        """Each replica of `model` started from now on loads it with `parameters` (the REST
        load call's `parameters` object; None: a plain load). Replicas already up keep what
        they loaded (the endpoint replaces them)."""
        ...


@dataclass(frozen=True)
class ModelActivity:
    """One model's load now, as its endpoint sees it: requests `in_flight` on its replicas,
    `held` waiting for a slot, and `last_request_at` (the endpoint's clock; None: none yet);
    `pinned` when it never goes to zero (`thaw.min_replicas` > 0). What decides whether a
    shared model is idle enough to be evicted."""

    in_flight: int = 0
    held: int = 0
    last_request_at: float | None = None
    pinned: bool = False


@dataclass(frozen=True)
class SharedReplicaStatus:
    """One runtime shared by several models (`thaw status`): `id` (its process or pod name),
    where it is (`pid` when local, `url`), `budget_bytes` and `used_bytes` of it (the models it
    holds and the loads in progress), and the `models` it holds now."""

    id: str
    url: str
    budget_bytes: int
    used_bytes: int
    models: tuple[str, ...] = ()
    pid: int | None = None


@dataclass(frozen=True)
class SharedCounts:
    """What shared placement did to one model so far: `evictions` (unloaded to make room for
    another model; its image stays in the host tier) and `loads` by where the weights came
    from (`host`: the host-memory tier, `cache`: the node cache, `store`, `files`: no image)."""

    evictions: int = 0
    loads: Mapping[str, int] = field(default_factory=dict)


@runtime_checkable
class SharedPlacement(Protocol):
    """A backend that can put several models' replicas in one runtime (`thaw.placement`
    shared): a replica of a shared model is room in a running runtime with budget for it,
    else a new one; the least recently used idle model there is evicted when room is needed."""

    def share(
        self,
        model: str,
        *,
        image_bytes: int,
        activity: Callable[[], ModelActivity],
        evict: Callable[[], Awaitable[None]],
        resources: frozenset[str] = frozenset(),
    ) -> None:
        """Place `model`'s replicas in shared runtimes from now on (called by the fleet at
        start, before the model's first replica). `image_bytes`: its weights as restored
        (the backend adds its per-model overhead); `activity()`: its load now, read when
        choosing what to evict; `evict()`: take the model to zero now (its replicas drained
        through the endpoint, so no request is cut), awaited before its room is reused;
        `resources`: the rate-limiter resources it names in common with other models
        (`--rate-limit`), so its replicas go beside theirs, one limiter counting them all."""
        ...

    def shared_status(self) -> tuple[SharedReplicaStatus, ...]:
        """Every shared runtime now (cheap and synchronous: read by `GET /thaw/status`)."""
        ...

    def shared_counts(self) -> Mapping[str, SharedCounts]:
        """Each shared model's evictions and loads by source so far."""
        ...


@runtime_checkable
class SharedLoadState(Protocol):
    """A backend whose activators share explicit mode's load state (Kubernetes: a Lease of the
    fleet, decision 0024), so that a load or unload on one activator holds on all of them.
    States are "loaded", "unloaded" or "down" (unloaded with a step); a model the shared state
    does not name keeps this activator's start state (`--load-model`). Without it the fleet
    keeps the state in memory."""

    def share_load_state(self, changed: Callable[[Mapping[str, str]], None]) -> None:
        """Keep the load state shared from the start on (called by the fleet before `start`,
        explicit mode only); call `changed(model -> new state)` for each change another
        activator made, as it is learned (bounded delay: the backend's documentation)."""
        ...

    def load_states(self) -> Mapping[str, str]:
        """The shared states as last known (model -> state). Cheap and synchronous."""
        ...

    async def write_load_states(self, changes: Mapping[str, str]) -> None:
        """Make `changes` (model -> "loaded" | "named" | "unloaded" | "down") the fleet's,
        before the call that asked answers; `ScalerUnavailable` (503) when they could not be
        shared (then nothing changed: the caller changes nothing either)."""
        ...

    async def refresh_load_states(self) -> None:
        """Learn the shared states now, not at the next periodic read: a request for a model
        not loaded here may follow a load another activator answered. Each change is told to
        `changed` before the return; bounded by the backend's API timeout; never raises (a
        failed read keeps the last known states)."""
        ...
