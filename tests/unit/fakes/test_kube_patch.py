"""The fake API server's patch formats: JSON patch (RFC 6902), merge patch (RFC 7386) and
strategic merge with Kubernetes' merge keys."""

from __future__ import annotations

import pytest

from tests.fakes.kube_errors import StatusError
from tests.fakes.kube_patch import (
    POD_SCHEMA,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)

POD = {
    "metadata": {"name": "p", "labels": {"a": "1"}, "finalizers": ["x"]},
    "spec": {
        "containers": [
            {
                "name": "runtime",
                "image": "thaw:1",
                "env": [{"name": "A", "value": "1"}],
                "ports": [{"containerPort": 8000}],
            },
            {"name": "sidecar", "image": "envoy:1"},
        ],
        "tolerations": [{"key": "gpu"}],
    },
    "status": {
        "conditions": [
            {"type": "Ready", "status": "False"},
            {"type": "PodScheduled", "status": "True"},
        ]
    },
}


def test_json_patch_operations() -> None:
    patched = json_patch(
        POD,
        [
            {"op": "add", "path": "/metadata/labels/b", "value": "2"},
            {"op": "replace", "path": "/spec/containers/0/image", "value": "thaw:2"},
            {"op": "remove", "path": "/metadata/finalizers/0"},
            {"op": "copy", "from": "/metadata/labels/a", "path": "/metadata/labels/c"},
            {"op": "move", "from": "/metadata/labels/c", "path": "/metadata/labels/d"},
            {"op": "add", "path": "/spec/tolerations/-", "value": {"key": "spot"}},
            {"op": "test", "path": "/metadata/labels/d", "value": "1"},
        ],
    )
    assert patched["metadata"]["labels"] == {"a": "1", "b": "2", "d": "1"}
    assert patched["metadata"]["finalizers"] == []
    assert patched["spec"]["containers"][0]["image"] == "thaw:2"
    assert patched["spec"]["tolerations"] == [{"key": "gpu"}, {"key": "spot"}]
    assert POD["spec"]["containers"][0]["image"] == "thaw:1"  # the input is not touched


def test_json_patch_failed_test_is_422() -> None:
    with pytest.raises(StatusError) as err:
        json_patch(
            POD,
            [
                {"op": "test", "path": "/metadata/labels/a", "value": "2"},
                {"op": "add", "path": "/metadata/labels/b", "value": "x"},
            ],
        )
    assert (err.value.code, err.value.reason) == (422, "Invalid")


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "remove", "path": "/metadata/nope"}],
        [{"op": "replace", "path": "/spec/containers/9/image", "value": "x"}],
        [{"op": "add", "path": "/missing/deep", "value": 1}],
    ],
)
def test_json_patch_on_a_missing_path_is_422(ops: list[dict[str, object]]) -> None:
    with pytest.raises(StatusError) as err:
        json_patch(POD, ops)
    assert err.value.code == 422


def test_json_patch_malformed_is_400() -> None:
    with pytest.raises(StatusError) as err:
        json_patch(POD, [{"op": "frobnicate", "path": "/x"}])
    assert err.value.code == 400


def test_merge_patch_replaces_lists_and_null_deletes() -> None:
    patched = merge_patch(
        POD,
        {"metadata": {"labels": {"a": None, "b": "2"}}, "spec": {"containers": [{"name": "only"}]}},
    )
    assert patched["metadata"]["labels"] == {"b": "2"}
    assert patched["spec"]["containers"] == [{"name": "only"}]


def test_strategic_merge_merges_containers_by_name_and_env_by_name() -> None:
    patched = strategic_merge_patch(
        POD,
        {
            "spec": {
                "containers": [
                    {"name": "runtime", "image": "thaw:2", "env": [{"name": "B", "value": "2"}]},
                    {"name": "new", "image": "busybox"},
                ]
            }
        },
        POD_SCHEMA,
    )
    containers = {c["name"]: c for c in patched["spec"]["containers"]}
    assert list(containers) == ["runtime", "sidecar", "new"]
    assert containers["runtime"]["image"] == "thaw:2"
    assert containers["runtime"]["ports"] == [{"containerPort": 8000}]
    assert containers["runtime"]["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "2"},
    ]
    assert containers["sidecar"] == {"name": "sidecar", "image": "envoy:1"}


def test_strategic_merge_directives_and_unkeyed_lists() -> None:
    patched = strategic_merge_patch(
        POD,
        {
            "metadata": {"finalizers": ["y", "x"]},
            "spec": {
                "containers": [{"name": "sidecar", "$patch": "delete"}],
                "tolerations": [{"key": "spot"}],
            },
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        },
        POD_SCHEMA,
    )
    assert [c["name"] for c in patched["spec"]["containers"]] == ["runtime"]
    assert patched["spec"]["tolerations"] == [{"key": "spot"}]  # no merge key: replaced
    assert patched["metadata"]["finalizers"] == ["x", "y"]  # a merged set
    assert patched["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "PodScheduled", "status": "True"},
    ]
    replaced = strategic_merge_patch(
        POD,
        {"spec": {"containers": [{"$patch": "replace"}, {"name": "solo", "image": "x"}]}},
        POD_SCHEMA,
    )
    assert replaced["spec"]["containers"] == [{"name": "solo", "image": "x"}]


def test_strategic_merge_element_without_merge_key_is_400() -> None:
    with pytest.raises(StatusError) as err:
        strategic_merge_patch(POD, {"spec": {"containers": [{"image": "x"}]}}, POD_SCHEMA)
    assert err.value.code == 400
