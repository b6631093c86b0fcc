"""Authorization for the fake API server: an RBAC-like allow list that both answers
SelfSubjectAccessReviews and enforces every request (403 Forbidden), so a backend's start-up
RBAC check and its handling of a Forbidden can be tested against the same rules."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Authorizer", "PolicyRule"]


@dataclass(frozen=True)
class PolicyRule:
    """Allows `verbs` on `resources` (a plural, `plural/subresource` or `*`) in `api_groups`
    ("" is core) within `namespaces` (`*` for all), like one rule of an RBAC Role."""

    verbs: tuple[str, ...]
    resources: tuple[str, ...]
    api_groups: tuple[str, ...] = ("*",)
    namespaces: tuple[str, ...] = ("*",)

    def allows(self, verb: str, group: str, resource: str, namespace: str | None) -> bool:
        return (
            ("*" in self.verbs or verb in self.verbs)
            and ("*" in self.api_groups or group in self.api_groups)
            and ("*" in self.resources or resource in self.resources)
            and ("*" in self.namespaces or (namespace or "") in self.namespaces)
        )


class Authorizer:
    """Everything is allowed until `set_rules` installs an allow list."""

    def __init__(self, user: str) -> None:
        self.user = user
        self._lock = threading.Lock()
        self._rules: tuple[PolicyRule, ...] | None = None

    def set_rules(self, rules: Sequence[PolicyRule] | None) -> None:
        """Install an allow list (None: allow everything again)."""
        with self._lock:
            self._rules = None if rules is None else tuple(rules)

    def allows(self, verb: str, group: str, resource: str, namespace: str | None) -> bool:
        with self._lock:
            rules = self._rules
        if rules is None:
            return True
        return any(rule.allows(verb, group, resource, namespace) for rule in rules)

    def review(self, body: dict[str, Any]) -> dict[str, Any]:
        """Answer a SelfSubjectAccessReview body: the same object with `status` filled."""
        spec = body.get("spec") or {}
        attrs = spec.get("resourceAttributes")
        if attrs is None:
            allowed = spec.get("nonResourceAttributes") is not None
        else:
            resource = attrs.get("resource", "")
            if attrs.get("subresource"):
                resource = f"{resource}/{attrs['subresource']}"
            allowed = self.allows(
                attrs.get("verb", ""), attrs.get("group", ""), resource, attrs.get("namespace")
            )
        status: dict[str, Any] = {"allowed": allowed}
        if not allowed:
            status["reason"] = "no RBAC rule of the fake API server allows this"
        return {**body, "status": status}
