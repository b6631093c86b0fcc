"""Triton's rate limiter resources: `--rate-limit`, `--rate-limit-resource`, and the most of each
resource the loaded instances may hold at once (Triton's "Max Resource Map").

    (flags and their grammar: thawserver.rate_limit_flags; what an instance needs and the two
     refusals of a load: thawserver.rate_limit_resources; both shared with `thaw up`)
    requirements(config, devices)      -> {(device, "R1"): 8, ...}   per instance group
    ResourceLimits(mode, explicit).update("model_init_del", reqs) -> the new map, or
                                          RateLimitError when an explicit limit is below a need

With `--rate-limit=execution_count` Triton computes, per device (and GLOBAL for a resource its
config marks `global: true`), the largest count any loaded instance asks for, or the explicit
count `--rate-limit-resource` gives (which must cover every instance's need: a load asking for
more is refused in Triton's words). Thaw keeps that map, refuses such loads, and logs the map at
every change as Triton does; runtime.scheduling.resource_gate holds each instance's resources
while it executes, and serves waiting instances by their group's `priority` (InstanceNeeds).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from runtime.errors import RepositoryError
from thawserver.rate_limit_flags import ExplicitResource, RateLimitMode, parse_mode, parse_resource
from thawserver.rate_limit_resources import (
    GLOBAL,
    ResourceKey,
    explicit_count,
    load_refusal,
    requirements,
)
from tritonconfig.schema import mc

__all__ = [
    "GLOBAL",
    "ExplicitResource",
    "InstanceNeeds",
    "RateLimitError",
    "RateLimitMode",
    "ResourceKey",
    "ResourceLimits",
    "instance_needs",
    "parse_mode",
    "parse_resource",
    "requirements",
]

logger = logging.getLogger(__name__)


class RateLimitError(RepositoryError):
    """A load whose instances need more of a resource than `--rate-limit-resource` gives."""


def instance_needs(
    config: mc.ModelConfig, placements: Iterable[tuple[str, int]]
) -> list[dict[ResourceKey, int]]:
    """What each instance holds while it executes: its group's `rate_limiter` resources, on
    its device (`placements`: each instance's group name and device id) or GLOBAL."""
    groups = {group.name: group for group in config.instance_group}
    needs: list[dict[ResourceKey, int]] = []
    for group_name, device in placements:
        group = groups.get(group_name)
        resources = group.rate_limiter.resources if group is not None else ()
        held = InstanceNeeds(
            {
                (GLOBAL if getattr(r, "global") else device, r.name): r.count
                for r in resources
                if r.count > 0
            }
        )
        held.priority = max(group.rate_limiter.priority, 1) if group is not None else 1
        needs.append(held)
    return needs


class InstanceNeeds(dict[ResourceKey, int]):
    """One instance's resources, and its group's rate-limiter `priority` (Triton's weight: an
    instance of priority 2 gets half the turns of one of priority 1 when both wait; 0 is 1)."""

    priority: int = 1


@dataclass
class ResourceLimits:
    """The server's resource map: every loaded model's needs and the explicit limits.

    Owned by the model loader, changed under each model's own load lock; `update` and `drop`
    replace one model's entry whole, so loads of two models never see half of each other."""

    mode: RateLimitMode = RateLimitMode.OFF
    explicit: tuple[ExplicitResource, ...] = ()
    _needs: dict[str, dict[ResourceKey, int]] = field(default_factory=dict)
    _last: dict[ResourceKey, int] = field(default_factory=dict)
    # What each model loading or loaded asks for, from its `check` on: two loads at once see
    # each other's scopes (a resource global in one and per device in the other).
    _claims: dict[str, dict[ResourceKey, int]] = field(default_factory=dict)

    def check(self, model: str, needs: Mapping[ResourceKey, int]) -> None:
        """RateLimitError, in Triton's words, for a resource global in one instance group (of
        any model loading or loaded, or `model`) and per device in another, or an explicit
        limit below what an instance of `model` needs."""
        if self.mode is RateLimitMode.OFF:
            return
        others = [n for m, n in self._claims.items() if m != model]  # a reload replaces its own
        reason = load_refusal(needs, others, self.explicit)
        if reason is not None:
            raise RateLimitError(reason)
        self._claims[model] = dict(needs)

    def withdraw(self, model: str) -> None:
        """A load of `model` failed after its `check`: its claim goes back to what it has
        loaded (nothing, for a first load)."""
        loaded = self._needs.get(model)
        if loaded is None:
            self._claims.pop(model, None)
        else:
            self._claims[model] = loaded

    def update(self, model: str, needs: Mapping[ResourceKey, int]) -> dict[ResourceKey, int]:
        """Record `model`'s needs (after `check`); the resource map now."""
        self._needs[model] = dict(needs)
        self._claims[model] = dict(needs)
        return self._changed()

    def drop(self, model: str) -> dict[ResourceKey, int]:
        """Forget an unloaded model's needs; the resource map now."""
        self._needs.pop(model, None)
        self._claims.pop(model, None)
        return self._changed()

    @property
    def current(self) -> Mapping[ResourceKey, int]:
        """The resource map as of the last `update` or `drop` (runtime.scheduling.resource_gate
        reads it at every execution: no recomputation)."""
        return self._last

    def max_resources(self) -> dict[ResourceKey, int]:
        """Per (device, resource): the explicit count, else the largest any instance needs."""
        if self.mode is RateLimitMode.OFF:
            return {}
        limits: dict[ResourceKey, int] = {}
        for needs in self._needs.values():
            for key, count in needs.items():
                limits[key] = max(limits.get(key, 0), count)
        for key in limits:
            explicit = explicit_count(self.explicit, key[1], key[0])
            if explicit is not None:
                limits[key] = explicit
        return limits

    def _changed(self) -> dict[ResourceKey, int]:
        limits = self.max_resources()
        if limits != self._last:
            self._last = limits
            logger.debug("%s", resource_map_text(limits))
        return limits


def resource_map_text(limits: Mapping[ResourceKey, int]) -> str:
    """Triton's verbose "Max Resource Map" message, with its newlines and tabs: an escaped
    record (thawserver.log_records, the default) writes them `\\n` and `\\t`, as Triton's log
    does, which is what a test reading the log matches."""
    text = "\nMax Resource Map===>\n"
    for device in sorted({d for d, _ in limits}):
        text += f"\tDevice: {'GLOBAL' if device == GLOBAL else device}\n"
        for (d, name), count in sorted(limits.items()):
            if d == device:
                text += f"\t\tResource: {name}\t Count: {count}\n"
    return text
