"""`KubernetesConfig`: the settings of the Kubernetes scaler backend (`--scaler kubernetes`).

Where the fleet lives (namespace, the warm pool's Deployment and selector, how to reach the
API), who this activator is among its peers (id, the address its peer-report port is reached
at) and the timings of the scaling Lease, the pod watch, drains and the collection pass. Built
once in cli.py; times in seconds. Importing it does not import kubernetes-asyncio.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from activator.scaler.shared_settings import SharedSettings

__all__ = [
    "DEFAULT_CLASS",
    "POOL_LABEL",
    "KubernetesConfig",
    "PoolClass",
    "is_class_name",
    "parse_pool_class",
    "parse_selector",
]

DEFAULT_CLASS = "default"  # the class of `--pool-deployment` / `--pool-selector`
POOL_LABEL = (
    "thaw.dev/pool"  # a `--pool-class NAME=DEPLOYMENT` pool selects thaw.dev/pool=DEPLOYMENT
)
_MAX_NAME = 63


def is_class_name(text: str) -> bool:
    """A placement class name: a DNS label (lower-case letters, digits, '-'; 1-63)."""
    return (
        0 < len(text) <= _MAX_NAME
        and all(c.isascii() and (c.islower() or c.isdigit() or c == "-") for c in text)
        and text[0] != "-"
        and text[-1] != "-"
    )


def parse_pool_class(text: str) -> tuple[str, str]:
    """`NAME=DEPLOYMENT` (`--pool-class`) as (name, deployment); ValueError says why."""
    name, sep, deployment = text.partition("=")
    name, deployment = name.strip(), deployment.strip()
    if not sep or not is_class_name(name):
        raise ValueError("must be NAME=DEPLOYMENT, NAME a DNS label (a-z, 0-9, '-')")
    if name == DEFAULT_CLASS:
        raise ValueError(
            f"class {DEFAULT_CLASS!r} is the pool of --pool-deployment and --pool-selector"
        )
    if not is_class_name(deployment):
        raise ValueError(f"{deployment!r} is not a Deployment name (a DNS label)")
    return name, deployment


@dataclass(frozen=True)
class PoolClass:
    """One placement class: its warm pool is the Deployment `deployment`, whose selector is
    exactly `selector`; a model of the class claims only that pool's pods, and a model pod
    made for it (no pool pod ready) is made from that Deployment's template."""

    name: str
    deployment: str
    selector: tuple[tuple[str, str], ...]

    @property
    def selector_text(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.selector)


def parse_selector(text: str) -> tuple[tuple[str, str], ...]:
    """An equality label selector `k=v[,k2=v2]` as pairs; ValueError names what is wrong.

    Only equality terms: a claim takes a pod out of the pool by removing exactly these keys,
    so the pool's Deployment must select on them and nothing else."""
    pairs: list[tuple[str, str]] = []
    for term in text.split(","):
        key, sep, value = term.strip().partition("=")
        key, value = key.strip(), value.strip().removeprefix("=")  # `k==v` is `k=v`
        if not sep or not key or any(c in key + value for c in "!()<> "):
            raise ValueError(f"{term.strip()!r} is not a `key=value` term")
        pairs.append((key, value))
    if not pairs:
        raise ValueError("the selector is empty")
    return tuple(pairs)


@dataclass(frozen=True)
class KubernetesConfig:
    """The Kubernetes backend's settings.

    Fleet: runtime pods live in `namespace`; the warm pool is the Deployment `pool_deployment`
    whose selector is exactly `pool_selector`; a claimed pod loses those labels and gains
    `thaw.dev/fleet=<fleet>` and `thaw.dev/model=<label>`, by which it is found again.
    API: `kubeconfig` (None: the default file) or `in_cluster` (the pod's service account).
    Peers: this activator is `activator_id` (its pod name) in the Lease `lease_name`; followers
    reach the leader's peer-report port at the `advertise_host` the leader wrote there.
    `leader_election` off: this activator always scales (a single activator).
    Runtime ports: a pod's KServe v2 HTTP surface (`runtime_port`) and gRPC service
    (`runtime_grpc_port`, where the activator forwards gRPC calls), each read from the pod's
    container port of that name unless given.
    Placement: the pool above is the class `default`; `pool_classes` adds (name, Deployment)
    pairs, each selecting `thaw.dev/pool=<Deployment>`; `model_classes` gives a model's class
    (its `thaw.placement_class`; absent: `default`).
    """

    namespace: str = "default"
    pool_deployment: str = "thaw-pool"
    pool_selector: tuple[tuple[str, str], ...] = (("thaw.dev/pool", "thaw-pool"),)
    fleet: str = "thaw"
    kubeconfig: Path | None = None
    kube_context: str | None = None
    in_cluster: bool = False
    activator_id: str = "thaw-activator"
    models: tuple[str, ...] = ()  # what this activator serves; claimed pods of others go
    pool_classes: tuple[tuple[str, str], ...] = ()  # --pool-class NAME=DEPLOYMENT, in order
    model_classes: tuple[tuple[str, str], ...] = ()  # model -> placement class (not default)
    runtime_port: int | None = None  # None: the pod's container port named `http`, else 8000
    runtime_grpc_port: int | None = None  # None: the pod's container port named `grpc`, else 8001
    # The scaling Lease (coordination.k8s.io/v1) and the peer reports to its holder.
    leader_election: bool = True
    lease_name: str = "thaw-activator-leader"
    lease_duration_s: int = 15
    peer_host: str = "127.0.0.1"  # where this activator's peer-report port listens
    peer_port: int = 8008  # 0: any free port
    advertise_host: str | None = None  # how peers reach it (pod IP); None: peer_host
    report_interval_s: float = 0.5  # a follower's report period (and at once on new demand)
    report_ttl_s: float = 3.0  # a report older than this no longer counts
    # Pods: readiness, drains, the collection pass, API calls and the pod watch.
    unready_lost_s: float = 10.0  # a claimed pod not Ready this long is lost
    # A model pod no node can take (Pending, PodScheduled=False, Unschedulable) is held for a
    # node autoscaler this long before its start fails; the activation timeout then starts
    # again from the moment it is scheduled (an image pull and the runtime's start follow).
    node_provisioning_timeout_s: float = 600.0
    drain_notice_s: float = 1.0  # draining mark -> delete, so peers stop routing first
    collect_interval_s: float = 10.0
    orphan_grace_s: float = 60.0  # a serving pod no activator of ours attached, this long
    api_timeout_s: float = 10.0  # one API call
    watch_timeout_s: int = 240  # one watch request (server-side timeoutSeconds)
    backoff_s: tuple[float, float] = (0.1, 5.0)  # API error back-off (first, max)
    # Shared placement's budgets and graces (`--shared-*`, `--evict-grace-s`): decision 0022.
    shared: SharedSettings = field(default_factory=SharedSettings)

    def classes(self) -> dict[str, PoolClass]:
        """Every placement class by name, `default` first."""
        found = {DEFAULT_CLASS: PoolClass(DEFAULT_CLASS, self.pool_deployment, self.pool_selector)}
        for name, deployment in self.pool_classes:
            found[name] = PoolClass(name, deployment, ((POOL_LABEL, deployment),))
        return found

    def class_of(self, model: str) -> str:
        """The placement class of `model` (`default` unless its settings name another)."""
        return self._class_by_model.get(model, DEFAULT_CLASS)

    @cached_property
    def _class_by_model(self) -> dict[str, str]:
        """`model_classes` as a table, made once per config."""
        return dict(self.model_classes)
