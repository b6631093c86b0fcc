"""The write strategy of each built-in type, as the real registry applies it: defaulting on
create, validation (422 with every field cause), MicroTime normalisation of Leases, a Secret's
`stringData` folded into its base64 `data`, and the immutability rules a backend is likely to
meet (a pod's spec, a workload's selector, a Secret's type)."""

from __future__ import annotations

import base64
import binascii
import json
import random
import re
from collections.abc import Callable, Mapping
from typing import Any

from tests.fakes.kube_errors import StatusError, bad_request, invalid
from tests.fakes.kube_resources import (
    DEPLOYMENTS,
    LEASES,
    PODS,
    REPLICASETS,
    SECRETS,
    SERVICES,
    ResourceType,
    micro_time,
)
from tests.fakes.kube_selectors import selector_from_object

__all__ = ["default_object", "validate_object", "validate_update"]


# --- defaulting ------------------------------------------------------------------------------


def _default_probe(probe: dict[str, Any]) -> None:
    for key, value in (
        ("timeoutSeconds", 1),
        ("periodSeconds", 10),
        ("successThreshold", 1),
        ("failureThreshold", 3),
    ):
        probe.setdefault(key, value)
    if "httpGet" in probe:
        probe["httpGet"].setdefault("scheme", "HTTP")
        probe["httpGet"].setdefault("path", "/")


def _default_pod_spec(spec: dict[str, Any]) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        image = str(container.get("image", ""))
        latest = ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")
        container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        for port in container.get("ports") or []:
            port.setdefault("protocol", "TCP")
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            if isinstance(container.get(probe), dict):
                _default_probe(container[probe])


def _default_workload(spec: dict[str, Any], *, deployment: bool) -> None:
    spec.setdefault("replicas", 1)
    if deployment:
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        spec.setdefault(
            "strategy",
            {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
            },
        )
    template = spec.setdefault("template", {})
    _default_pod_spec(template.setdefault("spec", {}))


def _default_service(spec: dict[str, Any]) -> None:
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec.get("clusterIP") in (None, ""):
        spec["clusterIP"] = f"10.96.{random.randint(0, 255)}.{random.randint(1, 254)}"
    spec.setdefault("clusterIPs", [spec["clusterIP"]])
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))


def default_object(rtype: ResourceType, obj: dict[str, Any]) -> None:
    """Fill the defaults the real server's defaulting sets on create, in place."""
    if rtype is PODS:
        _default_pod_spec(obj.setdefault("spec", {}))
        obj.setdefault("status", {}).setdefault("phase", "Pending")
        obj["status"].setdefault("qosClass", "BestEffort")
    elif rtype in (DEPLOYMENTS, REPLICASETS):
        _default_workload(obj.setdefault("spec", {}), deployment=rtype is DEPLOYMENTS)
        status = obj.setdefault("status", {})
        if rtype is REPLICASETS:
            status.setdefault("replicas", 0)  # not omitempty in ReplicaSetStatus
    elif rtype is SERVICES:
        _default_service(obj.setdefault("spec", {}))
        obj.setdefault("status", {"loadBalancer": {}})
    elif rtype is LEASES:
        obj.setdefault("spec", {})


# --- validation ------------------------------------------------------------------------------

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def _name_causes(rtype: ResourceType, name: str) -> list[tuple[str, str]]:
    dns_label = rtype in (SERVICES,)
    pattern, limit = (_LABEL, 63) if dns_label else (_SUBDOMAIN, 253)
    if not pattern.match(name) or len(name) > limit:
        kind = "RFC 1035 label" if dns_label else "RFC 1123 subdomain"
        return [
            (
                "metadata.name",
                f'Invalid value: "{name}": a lowercase {kind} must consist of '
                "lower case alphanumeric characters, '-' or '.'",
            )
        ]
    return []


def _label_causes(labels: Any, where: str) -> list[tuple[str, str]]:
    if labels is None:
        return []
    if not isinstance(labels, Mapping):
        return [(where, "Invalid value: must be a map of strings")]
    causes = []
    for key, value in labels.items():
        if not _QUALIFIED.match(str(key)) or len(str(key).split("/")[-1]) > 63:
            causes.append((where, f'Invalid value: "{key}": name part must be a valid label key'))
        if not isinstance(value, str) or not _LABEL_VALUE.match(value) or len(value) > 63:
            causes.append(
                (
                    where,
                    f'Invalid value: "{value}": a valid label must be a string of '
                    "at most 63 alphanumeric characters, '-', '_' or '.'",
                )
            )
    return causes


def _pod_spec_causes(spec: Any, where: str) -> list[tuple[str, str]]:
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    if not isinstance(containers, list) or not containers:
        return [(f"{where}.containers", "Required value")]
    causes, names = [], set()
    for i, container in enumerate(containers):
        name = container.get("name") if isinstance(container, Mapping) else None
        if not isinstance(name, str) or not _LABEL.match(name):
            causes.append((f"{where}.containers[{i}].name", f'Invalid value: "{name}"'))
        elif name in names:
            causes.append((f"{where}.containers[{i}].name", f'Duplicate value: "{name}"'))
        names.add(name)
        if isinstance(container, Mapping) and not container.get("image"):
            causes.append((f"{where}.containers[{i}].image", "Required value"))
    return causes


def _workload_causes(spec: Any) -> list[tuple[str, str]]:
    if not isinstance(spec, Mapping):
        return [("spec", "Required value")]
    causes: list[tuple[str, str]] = []
    selector = spec.get("selector")
    if not isinstance(selector, Mapping) or not (
        selector.get("matchLabels") or selector.get("matchExpressions")
    ):
        return [("spec.selector", "Required value")]
    replicas = spec.get("replicas")
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        causes.append(("spec.replicas", f"Invalid value: {replicas!r}: must be >= 0"))
    template = spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    try:
        matches = selector_from_object(selector).matches(labels)
    except StatusError as exc:
        return [("spec.selector", exc.message)]
    if not matches:
        causes.append(
            (
                "spec.template.metadata.labels",
                "Invalid value: `selector` does not match template `labels`",
            )
        )
    causes += _label_causes(labels, "spec.template.metadata.labels")
    return causes + _pod_spec_causes(template.get("spec"), "spec.template.spec")


def _lease_normalize(obj: dict[str, Any]) -> None:
    spec = obj.get("spec") or {}
    for key in ("acquireTime", "renewTime"):
        if spec.get(key) is not None:
            spec[key] = micro_time(spec[key], f"spec.{key}")
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and (not isinstance(duration, int) or duration <= 0):
        raise invalid(
            "Lease",
            LEASES.group,
            obj["metadata"].get("name", ""),
            [("spec.leaseDurationSeconds", f"Invalid value: {duration!r}: must be > 0")],
        )


def _secret_normalize(obj: dict[str, Any]) -> None:
    """What decoding a v1 Secret does on every write: each `data` value must be base64 (else
    400, as the real JSON decoder answers), `stringData` is encoded into `data` (its keys win)
    and dropped, and `type` defaults to Opaque."""
    data = obj.get("data") or {}
    strings = obj.pop("stringData", None) or {}
    if not isinstance(data, Mapping) or not isinstance(strings, Mapping):
        raise bad_request(
            'Secret in version "v1" cannot be handled as a Secret: data and stringData must be '
            "maps of strings"
        )
    for key, value in data.items():
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise bad_request(
                f'Secret in version "v1" cannot be handled as a Secret: data[{key}]: '
                "illegal base64 data"
            ) from None
    data = {**data, **{k: base64.b64encode(str(v).encode()).decode() for k, v in strings.items()}}
    if data:
        obj["data"] = data
    obj.setdefault("type", "Opaque")


_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def _secret_causes(obj: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [
        (
            f"data[{key}]",
            f'Invalid value: "{key}": a valid config key must consist of alphanumeric '
            "characters, '-', '_' or '.'",
        )
        for key in obj.get("data") or {}
        if not _CONFIG_KEY.match(key) or key in (".", "..") or len(key) > 253
    ]


_KIND_CHECKS: dict[str, Callable[[dict[str, Any]], list[tuple[str, str]]]] = {
    "Pod": lambda o: _pod_spec_causes(o.get("spec"), "spec"),
    "Deployment": lambda o: _workload_causes(o.get("spec")),
    "ReplicaSet": lambda o: _workload_causes(o.get("spec")),
    "Secret": _secret_causes,
}


def validate_object(rtype: ResourceType, obj: dict[str, Any]) -> None:
    """422 with every field cause, as the real validation does; leases' times normalised, a
    Secret decoded first (a 400 before any 422, as real)."""
    if rtype is SECRETS:
        _secret_normalize(obj)
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    causes = _name_causes(rtype, name) + _label_causes(meta.get("labels"), "metadata.labels")
    check = _KIND_CHECKS.get(rtype.kind)
    if check is not None and rtype.group in ("", "apps"):
        causes += check(obj)
    if causes:
        raise invalid(rtype.kind, rtype.group, name, causes)
    if rtype is LEASES:
        _lease_normalize(obj)


_POD_MUTABLE_NOTE = (
    "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
    "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` "
    "(only additions to existing tolerations) or `spec.terminationGracePeriodSeconds`"
)


def _pod_spec_frozen(spec: Mapping[str, Any]) -> str:
    frozen = json.loads(json.dumps(spec))
    for key in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"):
        frozen.pop(key, None)
    for group in ("containers", "initContainers"):
        for container in frozen.get(group) or []:
            container.pop("image", None)
    return json.dumps(frozen, sort_keys=True)


def validate_update(rtype: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> None:
    """The immutability rules the backend is likely to meet: a pod's spec, a workload's
    selector, a Secret's type."""
    name = old["metadata"]["name"]
    if rtype is PODS and _pod_spec_frozen(old.get("spec") or {}) != _pod_spec_frozen(
        new.get("spec") or {}
    ):
        raise invalid("Pod", "", name, [("spec", _POD_MUTABLE_NOTE)])
    if rtype in (DEPLOYMENTS, REPLICASETS) and (old.get("spec") or {}).get("selector") != (
        new.get("spec") or {}
    ).get("selector"):
        raise invalid(
            rtype.kind, rtype.group, name, [("spec.selector", "Invalid value: field is immutable")]
        )
    if rtype is SECRETS and old.get("type") != new.get("type"):
        raise invalid(
            "Secret",
            "",
            name,
            [("type", f'Invalid value: "{new.get("type")}": field is immutable')],
        )
