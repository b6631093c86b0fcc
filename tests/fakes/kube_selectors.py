"""Label and field selectors: the `?labelSelector=` / `?fieldSelector=` query grammar, and the
`metav1.LabelSelector` objects (`matchLabels` / `matchExpressions`) of Deployments and ReplicaSets.

Parse errors raise `StatusError` 400, with the messages the real server uses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tests.fakes.kube_errors import StatusError, bad_request

__all__ = [
    "FieldSelector",
    "LabelSelector",
    "Requirement",
    "field_value",
    "selector_from_object",
    "selector_string",
]

# A label key: optional DNS-subdomain prefix and '/', then a name of [A-Za-z0-9_.-].
_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_SET_OP = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s+(in|notin)\s*\((.*)\)\s*$")


@dataclass(frozen=True)
class Requirement:
    """One clause: `key op values` with op in =, !=, in, notin, exists, !exists."""

    key: str
    op: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        if self.op in ("!=", "notin"):
            return not present or labels[self.key] not in self.values
        if self.op == "exists":
            return present
        return not present  # "!exists"


def _split_clauses(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    clauses, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            clauses.append(text[start:i])
            start = i + 1
    clauses.append(text[start:])
    return [clause.strip() for clause in clauses]


def _check_key(key: str, clause: str) -> str:
    if not _KEY.match(key) or len(key.split("/")[-1]) > 63:
        raise bad_request(f"unable to parse requirement: invalid label key {key!r} in {clause!r}")
    return key


def _check_value(value: str, clause: str) -> str:
    if not _VALUE.match(value) or len(value) > 63:
        raise bad_request(
            f"unable to parse requirement: invalid label value {value!r} in {clause!r}"
        )
    return value


def _parse_clause(clause: str) -> Requirement:
    if not clause:
        raise bad_request("unable to parse requirement: found '', expected: identifier")
    set_op = _SET_OP.match(clause)
    if set_op:
        if set_op.group(1):
            raise bad_request(f"unable to parse requirement: unexpected '!' in {clause!r}")
        values = tuple(v.strip() for v in set_op.group(4).split(",") if v.strip())
        key = _check_key(set_op.group(2), clause)
        return Requirement(key, set_op.group(3), tuple(_check_value(v, clause) for v in values))
    for op in ("!=", "==", "="):
        if op in clause:
            key, _, value = clause.partition(op)
            return Requirement(
                _check_key(key.strip(), clause),
                "!=" if op == "!=" else "=",
                (_check_value(value.strip(), clause),),
            )
    if clause.startswith("!"):
        return Requirement(_check_key(clause[1:].strip(), clause), "!exists")
    return Requirement(_check_key(clause, clause), "exists")


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of requirements; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        if not text or not text.strip():
            return cls()
        return cls(tuple(_parse_clause(clause) for clause in _split_clauses(text)))

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(req.matches(labels) for req in self.requirements)


_EXPRESSION_OPS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}


def selector_from_object(selector: Mapping[str, Any] | None) -> LabelSelector:
    """A `metav1.LabelSelector` object as a `LabelSelector` (None or {} matches everything)."""
    if not selector:
        return LabelSelector()
    reqs = [Requirement(k, "=", (str(v),)) for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        op = _EXPRESSION_OPS.get(expr.get("operator", ""))
        if op is None:
            raise bad_request(f"{expr.get('operator')!r} is not a valid label selector operator")
        reqs.append(Requirement(expr["key"], op, tuple(expr.get("values") or ())))
    return LabelSelector(tuple(reqs))


def selector_string(selector: Mapping[str, Any] | None) -> str:
    """The query-string form of a `metav1.LabelSelector` (what `Scale.status.selector` holds)."""
    parts = [f"{k}={v}" for k, v in sorted(((selector or {}).get("matchLabels") or {}).items())]
    for expr in (selector or {}).get("matchExpressions") or []:
        op, key = expr.get("operator"), expr["key"]
        if op in ("In", "NotIn"):
            parts.append(f"{key} {op.lower()} ({','.join(expr.get('values') or ())})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string value of a dotted field path, "" when absent (as field selectors compare it)."""
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, Mapping):
            return ""
        node = node.get(part)
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


@dataclass(frozen=True)
class FieldSelector:
    """`field=value`, `field==value`, `field!=value` clauses over the fields a type supports."""

    clauses: tuple[tuple[str, bool, str], ...] = ()  # (field, equal, value)

    @classmethod
    def parse(cls, text: str | None, supported: Sequence[str]) -> FieldSelector:
        if not text or not text.strip():
            return cls()
        clauses = []
        for clause in _split_clauses(text):
            for op in ("!=", "==", "="):
                if op in clause:
                    field, _, value = clause.partition(op)
                    break
            else:
                raise bad_request(f"invalid selector: '{text}'; can't understand '{clause}'")
            field = field.strip()
            if field not in supported:
                allowed = ", ".join(f'"{f}"' for f in supported)
                raise StatusError(
                    400, "BadRequest", f'"{field}" is not a known field selector: only {allowed}'
                )
            clauses.append((field, op != "!=", value.strip()))
        return cls(tuple(clauses))

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all((field_value(obj, f) == v) == equal for f, equal, v in self.clauses)
