"""The pieces of a pod's `status` the test kubelet reports: addresses, conditions that keep
their `lastTransitionTime` until they flip, and container statuses (init and regular) in the
API's shape."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tests.fakes.kube_resources import now_time

__all__ = ["HOST_IP", "Conditions", "addresses", "container_status", "init_container_statuses"]

HOST_IP = "127.0.0.1"


def addresses(pod_ip: str | None) -> dict[str, Any]:
    """podIP(s) and hostIP(s)."""
    return {
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "hostIP": HOST_IP,
        "hostIPs": [{"ip": HOST_IP}],
    }


class Conditions:
    """Pod conditions; each keeps the time of its last flip."""

    def __init__(self) -> None:
        self._transitions: dict[str, tuple[str, str]] = {}

    def condition(self, kind: str, value: bool) -> dict[str, Any]:
        status = "True" if value else "False"
        previous = self._transitions.get(kind)
        if previous is None or previous[0] != status:
            self._transitions[kind] = (status, now_time())
        return {
            "type": kind,
            "status": status,
            "lastProbeTime": None,
            "lastTransitionTime": self._transitions[kind][1],
        }


def container_status(
    spec: Mapping[str, Any],
    *,
    scheme: str,
    ready: bool,
    started: bool,
    restarts: int,
    state: Mapping[str, Any],
    last_state: Mapping[str, Any],
    container_id: str | None,
) -> dict[str, Any]:
    """One `containerStatuses[]` entry."""
    image = spec.get("image", "")
    status = {
        "name": spec.get("name"),
        "image": image,
        "imageID": f"{scheme}://{image}",
        "ready": ready,
        "started": started,
        "restartCount": restarts,
        "state": dict(state),
        "lastState": dict(last_state),
    }
    if container_id:
        status["containerID"] = container_id
    return status


def init_container_statuses(
    specs: Sequence[Mapping[str, Any]],
    states: Sequence[Mapping[str, Any]],
    restarts: Sequence[int],
    *,
    scheme: str,
) -> list[dict[str, Any]]:
    """`initContainerStatuses`: ready once terminated with exit code 0."""
    found = []
    for spec, state, count in zip(specs, states, restarts, strict=True):
        done = "terminated" in state and state["terminated"]["exitCode"] == 0
        entry = container_status(
            spec, scheme=scheme, ready=done, started=False, restarts=count, state=state,
            last_state={}, container_id=None,
        )  # fmt: skip
        del entry["started"]
        found.append(entry)
    return found
