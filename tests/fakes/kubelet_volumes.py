"""The test kubelet's stand-in for a pod sandbox: volumes as local directories (emptyDir,
configMap and secret under the pod's directory, hostPath through the kubelet's mapping), each
`volumeMounts[].mountPath` (+ `subPath`) resolved to one, the ConfigMaps a container's env
reads, and the ports it needs free on its pod IP.

To a kubelet a configMap and a secret volume are one thing, an API object's keys projected as
files (`items` key -> path, `defaultMode` and per-item `mode`, `optional`), read-only; so
`write_object_volume` writes both, from a `VolumeFilesReader` that fetches the object's files
decoded (a ConfigMap's `data` as UTF-8 and its `binaryData`, a Secret's base64 `data`).
`set_volume_ownership` is what the kubelet does to such a volume under a pod's `fsGroup`."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from tests.fakes.kubelet_container import ContainerConfigError

__all__ = [
    "OBJECT_VOLUMES",
    "ConfigMapReader",
    "VolumeFilesReader",
    "container_ports",
    "mount_volumes",
    "object_volume_kind",
    "referenced_configmaps",
    "set_volume_ownership",
    "unsupported_volume",
    "write_object_volume",
]

ConfigMapReader = Callable[[str], Awaitable[dict[str, str] | None]]
# (volume kind: "configMap" | "secret", object name) -> the object's files decoded; None: no
# such object
VolumeFilesReader = Callable[[str, str], Awaitable[dict[str, bytes] | None]]

# volume kind -> (the field naming its object, the object as the kubelet's messages name it)
OBJECT_VOLUMES: Mapping[str, tuple[str, str]] = {
    "configMap": ("name", "configmap"),
    "secret": ("secretName", "secret"),
}


def object_volume_kind(volume: Mapping[str, Any]) -> str | None:
    """The volume's kind, "configMap" or "secret", when it projects an API object's keys;
    else None."""
    return next((kind for kind in OBJECT_VOLUMES if kind in volume), None)


def unsupported_volume(volume: Mapping[str, Any]) -> ContainerConfigError:
    """The refusal of a volume kind the test kubelet does not run."""
    kind = next((k for k in volume if k != "name"), "?")
    return ContainerConfigError(
        f"volume {volume['name']!r} is a {kind} volume: the test kubelet supports emptyDir, "
        "hostPath, configMap and secret volumes"
    )


async def write_object_volume(
    directory: Path, volume: Mapping[str, Any], read_files: VolumeFilesReader
) -> None:
    """A configMap or secret volume's files in `directory`: every key (or the `items`, nested
    paths made), `defaultMode` (0644) or the item's `mode`. A missing object or key is a
    ContainerConfigError in the kubelet's words (`secret "x" not found`) unless `optional`."""
    kind = object_volume_kind(volume)
    assert kind is not None, volume
    source = volume[kind] or {}
    name_field, noun = OBJECT_VOLUMES[kind]
    name = str(source.get(name_field, ""))
    files = await read_files(kind, name)
    if files is None:
        if not source.get("optional"):
            raise ContainerConfigError(f'{noun} "{name}" not found')
        files = {}
    mode = int(source.get("defaultMode", 0o644))
    items = source.get("items") or [{"key": k, "path": k} for k in files]
    for item in items:
        if item["key"] not in files:
            if source.get("optional"):
                continue
            raise ContainerConfigError(f"{noun} references non-existent key {item['key']}")
        path = directory / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(files[item["key"]])
        path.chmod(int(item.get("mode", mode)))


def set_volume_ownership(directory: Path, fs_group: int, *, read_only: bool) -> None:
    """The kubelet's `SetVolumeOwnership`: everything under `directory` (itself included) gets
    group `fs_group` and group read (+ write unless `read_only`); directories also setgid and
    group search. So a secret with `defaultMode: 0440` is readable by the pod's non-root user
    through its fsGroup, as on a cluster."""
    mask = 0o440 if read_only else 0o660
    for path in [directory, *directory.rglob("*")]:
        if path.is_symlink():
            continue
        os.chown(path, -1, fs_group)
        extra = mask | 0o2110 if path.is_dir() else mask
        path.chmod(path.stat().st_mode & 0o7777 | extra)


def container_ports(container: Mapping[str, Any]) -> set[int]:
    """The container's ports and numeric probe ports: what must be free on its pod IP."""
    ports = {int(p["containerPort"]) for p in container.get("ports") or []}
    for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
        handler = next(iter((container.get(kind) or {}).values()), None)
        if isinstance(handler, dict) and isinstance(handler.get("port"), int):
            ports.add(handler["port"])
    return ports


async def _volume_dirs(
    volumes: list[dict[str, Any]],
    *,
    pod_dir: Path,
    host_path: Callable[[str], Path],
    read_files: VolumeFilesReader,
) -> dict[str, Path]:
    local: dict[str, Path] = {}
    for volume in volumes:
        name = volume["name"]
        if "emptyDir" in volume or object_volume_kind(volume):
            local[name] = pod_dir / "volumes" / name
            local[name].mkdir(parents=True, exist_ok=True)
        elif "hostPath" in volume:
            local[name] = host_path(volume["hostPath"]["path"])
        else:
            raise unsupported_volume(volume)
        if object_volume_kind(volume):
            await write_object_volume(local[name], volume, read_files)
    return local


async def mount_volumes(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    pod_dir: Path,
    host_path: Callable[[str], Path],
    read_files: VolumeFilesReader,
) -> dict[str, Path]:
    """mountPath -> the local directory standing for it (created)."""
    volumes = await _volume_dirs(
        (pod.get("spec") or {}).get("volumes") or [],
        pod_dir=pod_dir,
        host_path=host_path,
        read_files=read_files,
    )
    mounts: dict[str, Path] = {}
    for mount in container.get("volumeMounts") or []:
        if mount["name"] not in volumes:
            raise ContainerConfigError(f"volumeMount {mount['name']!r} names no volume")
        local = volumes[mount["name"]] / mount.get("subPath", "")
        local.mkdir(parents=True, exist_ok=True)
        mounts[mount["mountPath"]] = local
    return mounts


async def referenced_configmaps(
    container: Mapping[str, Any], read_configmap: ConfigMapReader
) -> dict[str, dict[str, str]]:
    """The data of every (existing) ConfigMap the container's env and envFrom name."""
    names = {
        s["configMapRef"]["name"] for s in container.get("envFrom") or [] if "configMapRef" in s
    }
    names |= {
        v["valueFrom"]["configMapKeyRef"]["name"]
        for v in container.get("env") or []
        if "configMapKeyRef" in (v.get("valueFrom") or {})
    }
    found = {}
    for name in sorted(names):
        data = await read_configmap(name)
        if data is not None:
            found[name] = data
    return found
