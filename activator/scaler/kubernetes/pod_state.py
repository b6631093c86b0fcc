"""What the Kubernetes backend reads from a pod object (the API's JSON, as a dict).

Pods are plain dicts (the watch's `raw_object`, a list's items): no generated models, so a
watch event costs one JSON parse. The labels and annotations Thaw writes are named here, once.

    pool pod     the pool Deployment's selector labels; no `thaw.dev/model`
    model pod    `thaw.dev/fleet`, `thaw.dev/model` (label value) labels; annotations
                 `thaw.dev/model` (the exact name), `thaw.dev/state` (loading | serving |
                 draining), `thaw.dev/claimed-by`, `thaw.dev/claimed-at`
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

__all__ = [
    "ANNOTATION_CLAIMED_AT",
    "ANNOTATION_CLAIMED_BY",
    "ANNOTATION_MODEL",
    "ANNOTATION_STATE",
    "DEFAULT_GRPC_PORT",
    "DEFAULT_RUNTIME_PORT",
    "LABEL_FLEET",
    "LABEL_MODEL",
    "Pod",
    "PodState",
    "annotation",
    "cannot_start",
    "grpc_address",
    "is_deleting",
    "is_finished",
    "is_ready",
    "is_scheduled",
    "name_of",
    "pod_ip",
    "restart_count",
    "runtime_url",
    "state_of",
    "unschedulable",
]

Pod = dict[str, Any]

LABEL_FLEET = "thaw.dev/fleet"
LABEL_MODEL = "thaw.dev/model"
ANNOTATION_MODEL = "thaw.dev/model"
ANNOTATION_STATE = "thaw.dev/state"
ANNOTATION_CLAIMED_BY = "thaw.dev/claimed-by"
ANNOTATION_CLAIMED_AT = "thaw.dev/claimed-at"
DEFAULT_RUNTIME_PORT = 8000  # `thaw serve --port`: KServe v2 HTTP, model control, /metrics
DEFAULT_GRPC_PORT = 8001  # `thaw serve --grpc-port`: KServe v2 gRPC (Triton's port)


class PodState(StrEnum):
    """Where a model pod is in its life, as its `thaw.dev/state` annotation says."""

    LOADING = "loading"  # claimed or created; the model is being loaded
    SERVING = "serving"  # the load call returned 200: any activator may route to it
    DRAINING = "draining"  # the scaling leader is taking it away: stop routing to it


def name_of(pod: Pod) -> str:
    return str(pod.get("metadata", {}).get("name", ""))


def annotation(pod: Pod, key: str) -> str | None:
    value = (pod.get("metadata", {}).get("annotations") or {}).get(key)
    return value if isinstance(value, str) else None


def state_of(pod: Pod) -> PodState | None:
    raw = annotation(pod, ANNOTATION_STATE)
    try:
        return PodState(raw) if raw is not None else None
    except ValueError:
        return None


def is_ready(pod: Pod) -> bool:
    """The kubelet's Ready condition is True (its readiness probe passes)."""
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def is_deleting(pod: Pod) -> bool:
    return bool(pod.get("metadata", {}).get("deletionTimestamp"))


def is_finished(pod: Pod) -> bool:
    """The pod's containers ended for good (phase Succeeded or Failed)."""
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


# Waiting reasons after which a container will not start without someone changing something.
_STUCK = frozenset(
    {
        "CreateContainerConfigError",
        "CreateContainerError",
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CrashLoopBackOff",
    }
)


def cannot_start(pod: Pod) -> str | None:
    """Why the pod's runtime will not come up (`reason: message` of a container stuck
    waiting, e.g. an image that cannot be pulled), or None."""
    for status in pod.get("status", {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in _STUCK:
            message = str(waiting.get("message") or "")[:300]
            return f"{waiting['reason']}: {message}" if message else str(waiting["reason"])
    return None


def is_scheduled(pod: Pod) -> bool:
    """The pod is bound to a node (`spec.nodeName`)."""
    return bool(pod.get("spec", {}).get("nodeName"))


def unschedulable(pod: Pod) -> str | None:
    """Why no node can take the pod now (the scheduler's PodScheduled=False condition with
    reason Unschedulable: its message), or None: bound, or not judged yet."""
    if is_scheduled(pod):
        return None
    for condition in pod.get("status", {}).get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return str(condition.get("message") or "Unschedulable")[:300]
    return None


def pod_ip(pod: Pod) -> str | None:
    ip = pod.get("status", {}).get("podIP")
    return ip if isinstance(ip, str) and ip else None


def restart_count(pod: Pod) -> int:
    """Restarts of the pod's containers: a restarted runtime holds no model any more."""
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return sum(int(s.get("restartCount") or 0) for s in statuses)


def runtime_url(pod: Pod, port: int | None = None) -> str | None:
    """`http://<podIP>:<port>` of the runtime in `pod` (port: `port`, else the first
    container's port named `http`, else 8000); None while the pod has no IP."""
    host = _host(pod)
    if host is None:
        return None
    return f"http://{host}:{_port(pod, 'http', port, DEFAULT_RUNTIME_PORT)}"


def grpc_address(pod: Pod, port: int | None = None) -> str | None:
    """`<podIP>:<port>` (gRPC's target form) of the runtime's KServe v2 gRPC service in `pod`
    (port: `port`, else the first container's port named `grpc`, else 8001); None while the
    pod has no IP."""
    host = _host(pod)
    if host is None:
        return None
    return f"{host}:{_port(pod, 'grpc', port, DEFAULT_GRPC_PORT)}"


def _host(pod: Pod) -> str | None:
    """The pod's IP as the host part of an address (an IPv6 one in brackets)."""
    ip = pod_ip(pod)
    if ip is None:
        return None
    return f"[{ip}]" if ":" in ip else ip


def _port(pod: Pod, name: str, given: int | None, default: int) -> int:
    """`given`, else the first container's port named `name`, else `default`."""
    if given is not None:
        return given
    containers = pod.get("spec", {}).get("containers") or [{}]
    for entry in containers[0].get("ports") or []:
        if entry.get("name") == name and isinstance(entry.get("containerPort"), int):
            return int(entry["containerPort"])
    return default
