"""The three patch formats the API server accepts for built-in types: JSON patch (RFC 6902),
JSON merge patch (RFC 7386) and Kubernetes strategic merge patch.

Strategic merge merges the lists Kubernetes tags with `patchStrategy: merge` by their
`patchMergeKey` (containers by `name`, ports by `containerPort`, conditions by `type`, ...) and
honours the `$patch: replace|delete`, `$retainKeys`, `$deleteFromPrimitiveList/` and
`$setElementOrder/` directives; every other list is replaced, as in a merge patch. The merge keys
are declared per resource type with `MergeList` / `MergeSet` schemas, only for the fields listed
below (what Thaw's manifests use); an unlisted list is replaced.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.kube_errors import StatusError, bad_request

__all__ = [
    "DEPLOYMENT_SCHEMA",
    "METADATA_ONLY_SCHEMA",
    "POD_SCHEMA",
    "SERVICE_SCHEMA",
    "MergeList",
    "MergeSet",
    "Schema",
    "json_patch",
    "merge_patch",
    "strategic_merge_patch",
]


@dataclass(frozen=True)
class MergeList:
    """A list of objects merged by `key`; `item` is the schema of one element."""

    key: str
    item: Schema = field(default_factory=dict)


@dataclass(frozen=True)
class MergeSet:
    """A list of scalars merged as an ordered set (`metadata.finalizers`)."""


Schema = Mapping[str, "Schema | MergeList | MergeSet"]

_METADATA: Schema = {"ownerReferences": MergeList("uid"), "finalizers": MergeSet()}
_CONTAINER: Schema = {
    "env": MergeList("name"),
    "envFrom": {},
    "ports": MergeList("containerPort"),
    "volumeMounts": MergeList("mountPath"),
    "volumeDevices": MergeList("devicePath"),
    "resizePolicy": MergeList("resourceName"),
}
_POD_SPEC: Schema = {
    "containers": MergeList("name", _CONTAINER),
    "initContainers": MergeList("name", _CONTAINER),
    "ephemeralContainers": MergeList("name", _CONTAINER),
    "volumes": MergeList("name"),
    "imagePullSecrets": MergeList("name"),
    "hostAliases": MergeList("ip"),
    "topologySpreadConstraints": MergeList("topologyKey"),
}
POD_SCHEMA: Schema = {
    "metadata": _METADATA,
    "spec": _POD_SPEC,
    "status": {"conditions": MergeList("type"), "podIPs": MergeList("ip")},
}
DEPLOYMENT_SCHEMA: Schema = {
    "metadata": _METADATA,
    "spec": {"template": {"metadata": _METADATA, "spec": _POD_SPEC}},
    "status": {"conditions": MergeList("type")},
}
SERVICE_SCHEMA: Schema = {"metadata": _METADATA, "spec": {"ports": MergeList("port")}}
METADATA_ONLY_SCHEMA: Schema = {"metadata": _METADATA}


# --- JSON merge patch (RFC 7386) -------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, `null` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- JSON patch (RFC 6902) -------------------------------------------------------------------


def _unprocessable(message: str) -> StatusError:
    # The real server answers a patch that decodes but cannot be applied with 422.
    return StatusError(422, "Invalid", message)


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _unprocessable(f"JSON pointer {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], token: str, path: str, *, allow_end: bool) -> int:
    if allow_end and token == "-":
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise _unprocessable(f"invalid array index {token!r} in {path!r}")
    index = int(token)
    if index > len(container) - (0 if allow_end else 1):
        raise _unprocessable(f"array index {index} out of bounds in {path!r}")
    return index


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict):
            if token not in node:
                raise _unprocessable(f"doc is missing path: {path!r}")
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, path, allow_end=False)]
        else:
            raise _unprocessable(f"doc is missing path: {path!r}")
    return node


def _get(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent, last = _parent(doc, tokens, path), tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, path, allow_end=False)]
    raise _unprocessable(f"doc is missing path: {path!r}")


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent, last = _parent(doc, tokens, path), tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, path, allow_end=True), value)
    else:
        raise _unprocessable(f"doc is missing path: {path!r}")
    return doc


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise _unprocessable("cannot remove the whole document")
    parent, last = _parent(doc, tokens, path), tokens[-1]
    if isinstance(parent, dict) and last in parent:
        del parent[last]
    elif isinstance(parent, list):
        del parent[_index(parent, last, path, allow_end=False)]
    else:
        raise _unprocessable(f"unable to remove nonexistent key: {path!r}: missing value")
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    """Apply RFC 6902 operations to a copy of `target`; a failed `test` is a 422."""
    if not isinstance(operations, list):
        raise bad_request("json patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, dict) or not isinstance(op.get("path"), str):
            raise bad_request(f"invalid json patch operation: {op!r}")
        kind, path = op.get("op"), op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise bad_request(f"json patch {kind} operation at {path!r} has no value")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)  # replace requires the target to exist
            doc = _add(_remove(doc, path), path, copy.deepcopy(op["value"]))
        elif kind in ("move", "copy"):
            if not isinstance(op.get("from"), str):
                raise bad_request(f"json patch {kind} operation at {path!r} has no from")
            value = copy.deepcopy(_get(doc, op["from"]))
            if kind == "move":
                doc = _remove(doc, op["from"])
            doc = _add(doc, path, value)
        elif kind == "test":
            if _get(doc, path) != op["value"]:
                raise _unprocessable(f"testing value {path} failed: test failed")
        else:
            raise bad_request(f"Unexpected kind: {kind!r}")
    return doc


# --- Strategic merge patch -------------------------------------------------------------------

_SET_ORDER = "$setElementOrder/"
_DELETE_FROM = "$deleteFromPrimitiveList/"


def strategic_merge_patch(target: Any, patch: Any, schema: Schema) -> Any:
    """Apply a strategic merge patch to a copy of `target` using `schema`'s merge keys."""
    if not isinstance(patch, dict):
        raise bad_request("strategic merge patch must be a JSON object")
    return _merge_map(copy.deepcopy(target) if isinstance(target, dict) else {}, patch, schema)


def _merge_map(original: dict[str, Any], patch: dict[str, Any], schema: Schema) -> dict[str, Any]:
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive is not None:
        raise bad_request(f"unknown patch type: {directive!r} in map")
    result = dict(original)
    for key, value in patch.items():
        if key.startswith(_SET_ORDER):
            continue  # ordering hints only; the fake keeps the merged order
        if key.startswith(_DELETE_FROM):
            name = key[len(_DELETE_FROM) :]
            if isinstance(result.get(name), list):
                result[name] = [v for v in result[name] if v not in value]
            continue
        if key == "$retainKeys":
            continue
        sub = schema.get(key)
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            nested = sub if isinstance(sub, Mapping) else {}
            result[key] = _merge_map(result[key], value, nested)
        elif isinstance(value, dict):
            nested = sub if isinstance(sub, Mapping) else {}
            result[key] = _merge_map({}, value, nested)
        elif isinstance(value, list) and isinstance(sub, MergeList):
            result[key] = _merge_keyed_list(result.get(key) or [], value, sub)
        elif isinstance(value, list) and isinstance(sub, MergeSet):
            current = list(result.get(key) or [])
            result[key] = current + [v for v in value if v not in current]
        else:
            result[key] = copy.deepcopy(value)
    if "$retainKeys" in patch:
        keep = set(patch["$retainKeys"] or ())
        result = {k: v for k, v in result.items() if k in keep}
    return result


def _merge_keyed_list(original: list[Any], patch: list[Any], spec: MergeList) -> list[Any]:
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, dict) and "$patch" in i)]
    result = [copy.deepcopy(item) for item in original]
    for item in patch:
        if not isinstance(item, dict) or spec.key not in item:
            raise bad_request(f"map: {item!r} does not contain declared merge key: {spec.key}")
        at = next(
            (
                i
                for i, cur in enumerate(result)
                if isinstance(cur, dict) and cur.get(spec.key) == item[spec.key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if at is not None:
                del result[at]
        elif at is None:
            result.append(_merge_map({}, item, spec.item))
        else:
            result[at] = _merge_map(result[at], item, spec.item)
    return result
