"""runtime.models.instance_identity: which instances an instance update keeps."""

from __future__ import annotations

from google.protobuf import text_format

from runtime.devices.plan import Placement
from runtime.models.instance_identity import instance_keys, match_instances
from tritonconfig.schema import mc


def _keys(groups: str) -> list[str]:
    config = text_format.Parse(f"instance_group [ {groups} ]", mc.ModelConfig())
    placements = [
        Placement(g.name, i, "KIND_CPU", 0, "cpu")
        for g in config.instance_group
        for i in range(g.count)
    ]
    return instance_keys(config, placements)


def test_a_group_s_name_and_count_are_no_part_of_an_instance_s_identity() -> None:
    three = _keys('{ name: "g" count: 3 kind: KIND_CPU }')
    split = _keys('{ name: "a" count: 1 kind: KIND_CPU }, { name: "b" count: 2 kind: KIND_CPU }')
    assert three == split
    limited = _keys(
        '{ name: "g" count: 1 kind: KIND_CPU'
        ' rate_limiter { resources [ { name: "R1" count: 2 } ] } }'
    )
    assert limited != three[:1]


def test_the_old_instances_are_kept_oldest_first_the_rest_removed_or_added() -> None:
    match = match_instances(["c", "c", "c", "g"], ["g", "c", "x"])
    assert (match.kept, match.removed, match.added) == ([0, 3], [1, 2], [2])
    same = match_instances(["c", "c"], ["c", "c"])
    assert (same.kept, same.removed, same.added) == ([0, 1], [], [])
