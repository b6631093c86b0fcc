"""`KubernetesConfig`: the settings of the Kubernetes scaler backend (`--scaler kubernetes`).

Where the fleet lives (namespace, the warm pool's Deployment and selector, how to reach the
API), who this activator is among its peers (id, the address its peer-report port is reached
at) and the timings of the scaling Lease, the pod watch, drains and the collection pass. Built
once in cli.py; times in seconds. Importing it does not import kubernetes-asyncio.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["KubernetesConfig", "parse_selector"]


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
    drain_notice_s: float = 1.0  # draining mark -> delete, so peers stop routing first
    collect_interval_s: float = 10.0
    orphan_grace_s: float = 60.0  # a serving pod no activator of ours attached, this long
    api_timeout_s: float = 10.0  # one API call
    watch_timeout_s: int = 240  # one watch request (server-side timeoutSeconds)
    backoff_s: tuple[float, float] = (0.1, 5.0)  # API error back-off (first, max)
