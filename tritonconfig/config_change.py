"""How two configs of one model differ, as Triton's reload judges it: in nothing but their
version policy (the versions still selected stay up), or in their instance groups too (the
instances are updated in place). `thaw serve` acts on it (runtime.models.version_reuse,
runtime.models.instance_update) and `thaw up` decides the same way whether its replicas can
take a changed config in place (activator.fleet.in_place).
"""

from __future__ import annotations

from tritonconfig.schema import mc

__all__ = ["same_but_instances", "same_but_versions"]


def same_but_versions(before: mc.ModelConfig | None, after: mc.ModelConfig) -> bool:
    """Whether two configs differ in nothing but their version policy."""
    return _same_but(before, after, "version_policy")


def same_but_instances(before: mc.ModelConfig | None, after: mc.ModelConfig) -> bool:
    """Whether two configs differ in nothing but their instance groups (and version policy):
    a reload that Triton serves by updating the instances in place."""
    return _same_but(before, after, "version_policy", "instance_group")


def _same_but(before: mc.ModelConfig | None, after: mc.ModelConfig, *fields: str) -> bool:
    if before is None:
        return False
    a, b = mc.ModelConfig(), mc.ModelConfig()
    a.CopyFrom(before)
    b.CopyFrom(after)
    for name in fields:
        a.ClearField(name)
        b.ClearField(name)
    return a == b
