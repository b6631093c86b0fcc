"""The verbs of the fake API server on a decoded request: list (selectors, limit/continue),
create, patch (JSON, merge, strategic merge; 415 otherwise), delete (grace periods,
preconditions, propagation), deletecollection, the pod `binding` and the `/scale`
subresources. Each returns the JSON body to answer with or raises `StatusError`."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from typing import Any

from tests.fakes.kube_authz import Authorizer
from tests.fakes.kube_controllers import orphan_dependents
from tests.fakes.kube_errors import (
    StatusError,
    bad_request,
    conflict,
    expired,
    status_object,
    unsupported_media_type,
)
from tests.fakes.kube_patch import (
    METADATA_ONLY_SCHEMA,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)
from tests.fakes.kube_resources import PODS, SELF_SUBJECT_ACCESS_REVIEWS, ResourceType, scale_of
from tests.fakes.kube_selectors import FieldSelector, LabelSelector
from tests.fakes.kube_store import Store

__all__ = [
    "APPLY_PATCH",
    "JSON_PATCH",
    "MERGE_PATCH",
    "STRATEGIC_PATCH",
    "bind_pod",
    "create_object",
    "delete_collection",
    "delete_object",
    "list_objects",
    "patcher",
    "write_scale",
]

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


def patcher(rtype: ResourceType, content_type: str, body: Any) -> Callable[[Any], Any]:
    if content_type == JSON_PATCH:
        return lambda current: json_patch(current, body)
    if content_type == MERGE_PATCH:
        return lambda current: merge_patch(current, body)
    accepted = [JSON_PATCH, MERGE_PATCH, APPLY_PATCH]
    if content_type == STRATEGIC_PATCH and rtype.strategic_schema is not None:
        schema = rtype.strategic_schema
        return lambda current: strategic_merge_patch(current, body, schema)
    if content_type == APPLY_PATCH:
        raise StatusError(
            415,
            "UnsupportedMediaType",
            "server-side apply is not implemented by the fake API server",
        )
    if rtype.strategic_schema is not None:
        accepted.insert(2, STRATEGIC_PATCH)
    raise unsupported_media_type(content_type, accepted)


def _strip_type(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}


def list_objects(
    store: Store, rtype: ResourceType, namespace: str | None, query: Mapping[str, str]
) -> Any:
    labels = LabelSelector.parse(query.get("labelSelector"))
    fields = FieldSelector.parse(query.get("fieldSelector"), rtype.field_selectors)
    items, rv = store.objects(rtype, namespace)
    items = [o for o in items if labels.matches(o["metadata"].get("labels")) and fields.matches(o)]
    start: list[str] | None = None
    if query.get("continue"):
        try:
            token = json.loads(base64.urlsafe_b64decode(query["continue"]))
            rv, start = int(token["rv"]), list(token["start"])
        except (ValueError, KeyError, TypeError):
            raise bad_request("continue key is not valid") from None
        if rv < store.oldest_watchable:
            raise expired(
                "The provided continue parameter is too old to display a consistent "
                "list result. You can start a new list without the continue parameter."
            )
        items = [
            o for o in items if [o["metadata"].get("namespace", ""), o["metadata"]["name"]] > start
        ]
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    limit = int(query["limit"]) if query.get("limit", "").isdigit() else 0
    if limit and len(items) > limit:
        last = items[limit - 1]["metadata"]
        token = {"rv": rv, "start": [last.get("namespace", ""), last["name"]]}
        meta["continue"] = base64.urlsafe_b64encode(json.dumps(token).encode()).decode()
        meta["remainingItemCount"] = len(items) - limit
        items = items[:limit]
    return {
        "kind": f"{rtype.kind}List",
        "apiVersion": rtype.api_version,
        "metadata": meta,
        "items": [_strip_type(o) for o in items],
    }


def create_object(
    store: Store, authorizer: Authorizer, rtype: ResourceType, namespace: str | None, body: Any
) -> Any:
    if not isinstance(body, dict):
        raise bad_request(f"the body must be a {rtype.kind} object")
    if body.get("apiVersion") not in (None, rtype.api_version):
        raise bad_request(
            f"the API version in the data ({body['apiVersion']}) does not match "
            f"the expected API version ({rtype.api_version})"
        )
    if body.get("kind") not in (None, rtype.kind):
        raise bad_request(
            f"the kind in the data ({body['kind']}) does not match the expected kind ({rtype.kind})"
        )
    if rtype is SELF_SUBJECT_ACCESS_REVIEWS:
        return {
            "apiVersion": rtype.api_version,
            "kind": rtype.kind,
            **authorizer.review(body),
        }
    sent_ns = (body.get("metadata") or {}).get("namespace")
    if rtype.namespaced and sent_ns not in (None, "", namespace):
        raise bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    return store.create(rtype, namespace, body)


def _success(rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    body = status_object(
        200,
        "",
        "",
        {
            "name": obj["metadata"]["name"],
            "kind": rtype.plural,
            "uid": obj["metadata"]["uid"],
            **({"group": rtype.group} if rtype.group else {}),
        },
    )
    body.update(status="Success")
    for key in ("reason", "message", "code"):
        body.pop(key)
    return body


def delete_object(
    store: Store,
    types: Mapping[str, ResourceType],
    rtype: ResourceType,
    namespace: str | None,
    name: str,
    query: Mapping[str, str],
    body: Any,
) -> tuple[dict[str, Any], int]:
    """(body, HTTP status): pods and services answer with the object; other types with a
    Success `Status` when removed, or the object and 202 while finalizers hold it."""
    options = body if isinstance(body, dict) else {}
    grace = options.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
    try:
        grace_s = None if grace in (None, "") else int(grace)
    except ValueError:
        raise bad_request(f"invalid gracePeriodSeconds: {grace!r}") from None
    policy = options.get("propagationPolicy") or query.get("propagationPolicy")
    with store.lock:
        if policy == "Orphan" or options.get("orphanDependents") is True:
            uid = store.get(rtype, namespace, name)["metadata"]["uid"]
            orphan_dependents(store, types, uid)
        obj, removed = store.delete(
            rtype, namespace, name, grace_s=grace_s, preconditions=options.get("preconditions")
        )
    if rtype.delete_returns_object:
        return obj, 200
    return (_success(rtype, obj), 200) if removed else (obj, 202)


def delete_collection(
    store: Store, rtype: ResourceType, namespace: str | None, query: Mapping[str, str]
) -> Any:
    listed = list_objects(store, rtype, namespace, {k: v for k, v in query.items() if k != "limit"})
    deleted = []
    for item in listed["items"]:
        meta = item["metadata"]
        grace = query.get("gracePeriodSeconds")
        obj, _ = store.delete(
            rtype,
            meta.get("namespace"),
            meta["name"],
            grace_s=int(grace) if grace and grace.isdigit() else None,
        )
        deleted.append(_strip_type(obj))
    return {**listed, "items": deleted}


def bind_pod(store: Store, namespace: str | None, name: str, body: Any) -> Any:
    target = (body or {}).get("target") if isinstance(body, dict) else None
    if not isinstance(target, dict) or not target.get("name"):
        raise bad_request("a Binding needs target.name")

    def bind(pod: dict[str, Any]) -> dict[str, Any]:
        if pod["spec"].get("nodeName"):
            raise conflict(
                "pods/binding",
                "",
                name,
                f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"',
            )
        if pod["metadata"].get("deletionTimestamp"):
            raise conflict("pods/binding", "", name, "pod is being deleted")
        pod["spec"]["nodeName"] = target["name"]
        status = pod.setdefault("status", {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        status["conditions"] = [{"type": "PodScheduled", "status": "True"}, *conditions]
        return pod

    pod = store.update(PODS, namespace, name, bind, subresource="binding")
    return _success(PODS, pod) | {"code": 201}


def write_scale(
    store: Store,
    rtype: ResourceType,
    namespace: str | None,
    name: str,
    verb: str,
    content_type: str,
    body: Any,
) -> Any:
    def rescale(obj: dict[str, Any]) -> dict[str, Any]:
        current = scale_of(obj)
        if verb == "update":
            wanted = body
        else:
            patch_rtype = ResourceType(
                "autoscaling", "v1", "scale", "Scale", strategic_schema=METADATA_ONLY_SCHEMA
            )
            wanted = patcher(patch_rtype, content_type, body)(current)
        replicas = (wanted.get("spec") or {}).get("replicas") if isinstance(wanted, dict) else None
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise StatusError(
                422,
                "Invalid",
                f'Scale.autoscaling "{name}" is invalid: '
                f"spec.replicas: Invalid value: {replicas!r}: must be >= 0",
            )
        obj["spec"]["replicas"] = replicas
        sent_rv = (wanted.get("metadata") or {}).get("resourceVersion")
        obj["metadata"]["resourceVersion"] = sent_rv or obj["metadata"]["resourceVersion"]
        return obj

    return scale_of(store.update(rtype, namespace, name, rescale))
