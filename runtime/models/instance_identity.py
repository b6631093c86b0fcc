"""Which instances an instance update keeps, as Triton's does: an instance is the same when its
group says the same of it but for the group's name and count (kind, device, rate limiter,
passive, host policy, profile, secondary devices), so renaming or splitting a group, or
changing its count, keeps the instances it still has.

    old = ["cpu|0", "cpu|0", "cpu|0"]; new = ["cpu|0", "cpu|0"]
    match_instances(old, new) -> Match(kept=[0, 1], removed=[2], added=[])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from runtime.devices.plan import Placement
from tritonconfig.schema import mc

__all__ = ["Match", "instance_keys", "match_instances"]


def _group_identity(group: mc.ModelInstanceGroup) -> str:
    same = mc.ModelInstanceGroup()
    same.CopyFrom(group)
    same.ClearField("name")
    same.ClearField("count")
    same.ClearField("gpus")  # the placement's own device stands for them
    return same.SerializeToString(deterministic=True).hex()


def instance_keys(config: mc.ModelConfig, placements: Sequence[Placement]) -> list[str]:
    """One identity per placement (per instance), in order: its group's settings but name and
    count, its kind and its device."""
    groups = {group.name: _group_identity(group) for group in config.instance_group}
    return [
        f"{groups.get(p.group, '')}|{p.kind}|{p.device_id}|{p.restore_device}" for p in placements
    ]


@dataclass(frozen=True)
class Match:
    """Indices into the old keys (`kept`, `removed`, in the old order) and the new (`added`)."""

    kept: list[int]
    removed: list[int]
    added: list[int]
    new_keys: list[str]


def match_instances(old: Sequence[str], new: Sequence[str]) -> Match:
    """Pair each new instance with an old one of the same identity, oldest first; the old ones
    left over are removed, the new ones left over are added."""
    free: dict[str, list[int]] = {}
    for index, key in enumerate(old):
        free.setdefault(key, []).append(index)
    kept: list[int] = []
    added: list[int] = []
    for index, key in enumerate(new):
        if free.get(key):
            kept.append(free[key].pop(0))
        else:
            added.append(index)
    removed = sorted(i for left in free.values() for i in left)
    return Match(kept=sorted(kept), removed=removed, added=added, new_keys=list(new))
