"""The resource types the fake API server serves, the `metav1.Time` / `MicroTime` formats, and
the `/scale` view of a workload (defaulting and validation live in `kube_strategy`).

A `ResourceType` is what the real server's discovery describes (group, version, plural, kind,
scope, subresources) plus what the fake needs to behave like it: the strategic-merge schema
(None for a custom resource: strategic merge is then a 415), the field selectors the type
supports, whether it carries `metadata.generation`, and whether DELETE answers with the object
(pods, services) or a `Status`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tests.fakes.kube_errors import bad_request
from tests.fakes.kube_patch import (
    DEPLOYMENT_SCHEMA,
    METADATA_ONLY_SCHEMA,
    POD_SCHEMA,
    SERVICE_SCHEMA,
    Schema,
)
from tests.fakes.kube_selectors import selector_string

__all__ = [
    "BUILTIN_TYPES",
    "CONFIGMAPS",
    "DEPLOYMENTS",
    "LEASES",
    "PODS",
    "REPLICASETS",
    "SECRETS",
    "SELF_SUBJECT_ACCESS_REVIEWS",
    "SERVICES",
    "ResourceType",
    "custom_resource",
    "micro_time",
    "now_time",
    "scale_of",
    "template_hash",
]


@dataclass(frozen=True)
class ResourceType:
    """One REST resource: `/api/v1/namespaces/{ns}/pods` is ("", "v1", "pods", "Pod")."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    subresources: frozenset[str] = frozenset()
    strategic_schema: Schema | None = None
    field_selectors: tuple[str, ...] = ("metadata.name", "metadata.namespace")
    has_generation: bool = False
    delete_returns_object: bool = False
    verbs: tuple[str, ...] = (
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    )

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def base_path(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    @property
    def key(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


_GENERIC_FIELDS = ("metadata.name", "metadata.namespace")

PODS = ResourceType(
    "",
    "v1",
    "pods",
    "Pod",
    subresources=frozenset({"status", "binding"}),
    strategic_schema=POD_SCHEMA,
    field_selectors=(
        *_GENERIC_FIELDS,
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    has_generation=True,
    delete_returns_object=True,
)
SERVICES = ResourceType(
    "",
    "v1",
    "services",
    "Service",
    subresources=frozenset({"status"}),
    strategic_schema=SERVICE_SCHEMA,
    delete_returns_object=True,
)
CONFIGMAPS = ResourceType(
    "", "v1", "configmaps", "ConfigMap", strategic_schema=METADATA_ONLY_SCHEMA
)
SECRETS = ResourceType("", "v1", "secrets", "Secret", strategic_schema=METADATA_ONLY_SCHEMA)
DEPLOYMENTS = ResourceType(
    "apps",
    "v1",
    "deployments",
    "Deployment",
    subresources=frozenset({"status", "scale"}),
    strategic_schema=DEPLOYMENT_SCHEMA,
    has_generation=True,
)
REPLICASETS = ResourceType(
    "apps",
    "v1",
    "replicasets",
    "ReplicaSet",
    subresources=frozenset({"status", "scale"}),
    strategic_schema=DEPLOYMENT_SCHEMA,
    has_generation=True,
)
LEASES = ResourceType(
    "coordination.k8s.io", "v1", "leases", "Lease", strategic_schema=METADATA_ONLY_SCHEMA
)
SELF_SUBJECT_ACCESS_REVIEWS = ResourceType(
    "authorization.k8s.io",
    "v1",
    "selfsubjectaccessreviews",
    "SelfSubjectAccessReview",
    namespaced=False,
    verbs=("create",),
    strategic_schema=METADATA_ONLY_SCHEMA,
)
BUILTIN_TYPES = (
    PODS,
    SERVICES,
    CONFIGMAPS,
    SECRETS,
    DEPLOYMENTS,
    REPLICASETS,
    LEASES,
    SELF_SUBJECT_ACCESS_REVIEWS,
)


def custom_resource(
    group: str,
    version: str,
    plural: str,
    kind: str,
    *,
    status_subresource: bool = True,
    namespaced: bool = True,
) -> ResourceType:
    """A CustomResourceDefinition's resource: merge and JSON patch only (strategic merge: 415)."""
    return ResourceType(
        group,
        version,
        plural,
        kind,
        namespaced=namespaced,
        subresources=frozenset({"status"} if status_subresource else ()),
        has_generation=True,
    )


# --- time ------------------------------------------------------------------------------------


def now_time() -> str:
    """A `metav1.Time`: RFC 3339 in UTC, whole seconds."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_RFC3339 = re.compile(
    r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$", re.IGNORECASE
)


def micro_time(value: Any, field_path: str) -> str:
    """A `metav1.MicroTime` as the real server stores it: parsed, kept to the microsecond, and
    written back as RFC 3339 in UTC with six fraction digits. Unparseable -> 400, as real."""
    match = _RFC3339.match(value) if isinstance(value, str) else None
    if match is None:
        raise bad_request(
            f'{field_path}: parsing time "{value}" as "2006-01-02T15:04:05.000000Z07:00": '
            "cannot parse as RFC 3339"
        )
    base, fraction, zone = match.groups()
    micros = int((fraction or "0").ljust(6, "0")[:6])
    parsed = datetime.fromisoformat(base + ("+00:00" if zone.upper() == "Z" else zone))
    parsed = parsed.replace(microsecond=micros).astimezone(UTC)
    return parsed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --- /scale ----------------------------------------------------------------------------------


def scale_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The `autoscaling/v1` Scale view of a Deployment or ReplicaSet."""
    meta = obj["metadata"]
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        },
        "spec": {"replicas": obj["spec"].get("replicas", 0)},
        "status": {
            "replicas": (obj.get("status") or {}).get("replicas", 0),
            "selector": selector_string(obj["spec"].get("selector")),
        },
    }


def template_hash(template: Mapping[str, Any]) -> str:
    """The `pod-template-hash` label value of a Deployment's template."""
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    number = int(digest[:16], 16)
    return "".join(alphabet[(number >> (5 * i)) % len(alphabet)] for i in range(10))
