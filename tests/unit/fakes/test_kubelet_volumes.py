"""How the test kubelet writes configMap and secret volumes (one function for both, as to a
kubelet they are one thing): the decoded files at their `items` paths with `defaultMode` or the
item's `mode`, a missing object or key refused in the kubelet's words unless `optional`, an
unsupported volume kind named; and the fsGroup ownership podman mode gives such a volume."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.fakes.kubelet_container import ContainerConfigError
from tests.fakes.kubelet_volumes import mount_volumes, set_volume_ownership, write_object_volume

OBJECTS = {
    ("secret", "token"): {"token": b"s3cret", "other": b"\x00\x01"},
    ("configMap", "settings"): {"a.yaml": b"a: 1"},
}


async def _read(kind: str, name: str) -> dict[str, bytes] | None:
    return OBJECTS.get((kind, name))


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


async def test_a_secret_volume_is_its_items_with_their_modes(tmp_path: Path) -> None:
    source = {
        "secretName": "token",
        "defaultMode": 0o440,
        "items": [
            {"key": "token", "path": "token"},
            {"key": "other", "path": "nested/other", "mode": 0o400},
        ],
    }
    await write_object_volume(tmp_path, {"name": "t", "secret": source}, _read)
    assert (tmp_path / "token").read_bytes() == b"s3cret"
    assert (tmp_path / "nested" / "other").read_bytes() == b"\x00\x01"
    assert (_mode(tmp_path / "token"), _mode(tmp_path / "nested" / "other")) == (0o440, 0o400)


async def test_without_items_every_key_is_a_file_0644(tmp_path: Path) -> None:
    await write_object_volume(tmp_path, {"name": "t", "secret": {"secretName": "token"}}, _read)
    assert _names(tmp_path) == ["other", "token"]
    assert _mode(tmp_path / "token") == 0o644


async def test_a_configmap_volume_goes_the_same_way(tmp_path: Path) -> None:
    volume = {"name": "c", "configMap": {"name": "settings", "defaultMode": 0o600}}
    await write_object_volume(tmp_path, volume, _read)
    assert (tmp_path / "a.yaml").read_bytes() == b"a: 1" and _mode(tmp_path / "a.yaml") == 0o600


@pytest.mark.parametrize(
    ("volume", "message"),
    [
        ({"secret": {"secretName": "gone"}}, 'secret "gone" not found'),
        ({"configMap": {"name": "gone"}}, 'configmap "gone" not found'),
        (
            {"secret": {"secretName": "token", "items": [{"key": "nope", "path": "x"}]}},
            "secret references non-existent key nope",
        ),
    ],
)
async def test_a_missing_object_or_key_is_refused_in_words(
    tmp_path: Path, volume: dict[str, object], message: str
) -> None:
    with pytest.raises(ContainerConfigError) as err:
        await write_object_volume(tmp_path, {"name": "v", **volume}, _read)
    assert str(err.value) == message


async def test_an_optional_secret_or_key_that_is_missing_is_skipped(tmp_path: Path) -> None:
    await write_object_volume(
        tmp_path, {"name": "v", "secret": {"secretName": "gone", "optional": True}}, _read
    )
    items = [{"key": "nope", "path": "x"}, {"key": "token", "path": "t"}]
    source = {"secretName": "token", "optional": True, "items": items}
    await write_object_volume(tmp_path, {"name": "v", "secret": source}, _read)
    assert _names(tmp_path) == ["t"]


async def test_mount_volumes_maps_a_secret_and_names_an_unsupported_kind(tmp_path: Path) -> None:
    container = {"volumeMounts": [{"name": "t", "mountPath": "/etc/thaw-internal"}]}
    volumes = [{"name": "t", "secret": {"secretName": "token", "items": [
        {"key": "token", "path": "token"}]}}]  # fmt: skip
    mounts = await mount_volumes(
        {"spec": {"volumes": volumes}},
        container,
        pod_dir=tmp_path,
        host_path=lambda p: tmp_path / "host" / p.lstrip("/"),
        read_files=_read,
    )
    assert (mounts["/etc/thaw-internal"] / "token").read_bytes() == b"s3cret"

    claim = {"name": "c", "persistentVolumeClaim": {"claimName": "data"}}
    with pytest.raises(ContainerConfigError, match=r"persistentVolumeClaim volume.*secret"):
        await mount_volumes(
            {"spec": {"volumes": [claim]}},
            {},
            pod_dir=tmp_path,
            host_path=lambda p: tmp_path,
            read_files=_read,
        )


async def test_fs_group_ownership_makes_a_0440_secret_group_readable(tmp_path: Path) -> None:
    source = {"secretName": "token", "defaultMode": 0o400,
              "items": [{"key": "token", "path": "nested/token"}]}  # fmt: skip
    await write_object_volume(tmp_path, {"name": "t", "secret": source}, _read)
    group = os.getgid()  # a group this process may give files without root
    set_volume_ownership(tmp_path, group, read_only=True)
    token, nested = tmp_path / "nested" / "token", tmp_path / "nested"
    assert token.stat().st_gid == group and nested.stat().st_gid == group
    assert _mode(token) == 0o440, "group read added, nothing else"
    assert _mode(nested) & 0o2550 == 0o2550, "directories: setgid, group read and search"
