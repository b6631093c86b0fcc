"""The test kubelet's stand-in for a pod sandbox: volumes as local directories (emptyDir and
configMap under the pod's directory, hostPath through the kubelet's mapping), each
`volumeMounts[].mountPath` (+ `subPath`) resolved to one, the ConfigMaps a container's env
reads, and the ports it needs free on its pod IP."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from tests.fakes.kubelet_container import ContainerConfigError

__all__ = [
    "ConfigMapFilesReader",
    "ConfigMapReader",
    "container_ports",
    "mount_volumes",
    "referenced_configmaps",
    "write_configmap_volume",
]

ConfigMapReader = Callable[[str], Awaitable[dict[str, str] | None]]
# a configMap volume's files: `data` as UTF-8, `binaryData` decoded
ConfigMapFilesReader = Callable[[str], Awaitable[dict[str, bytes] | None]]


def write_configmap_volume(
    directory: Path, source: Mapping[str, Any], files: Mapping[str, bytes]
) -> None:
    """A configMap volume's files (`items` paths, nested directories, `defaultMode`/`mode`)."""
    mode = int(source.get("defaultMode", 0o644))
    items = source.get("items") or [{"key": k, "path": k} for k in files]
    for item in items:
        if item["key"] not in files:
            if source.get("optional"):
                continue
            raise ContainerConfigError(f"configmap references non-existent key {item['key']}")
        path = directory / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(files[item["key"]])
        path.chmod(int(item.get("mode", mode)))


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
    read_configmap: ConfigMapFilesReader,
) -> dict[str, Path]:
    local: dict[str, Path] = {}
    for volume in volumes:
        name = volume["name"]
        if "emptyDir" in volume or "configMap" in volume:
            local[name] = pod_dir / "volumes" / name
            local[name].mkdir(parents=True, exist_ok=True)
        elif "hostPath" in volume:
            local[name] = host_path(volume["hostPath"]["path"])
        else:
            kind = next((k for k in volume if k != "name"), "?")
            raise ContainerConfigError(
                f"volume {name!r} is a {kind} volume: the test kubelet supports emptyDir, "
                "hostPath and configMap volumes"
            )
        if "configMap" in volume:
            source = volume["configMap"]
            files = await read_configmap(source["name"])
            if files is None and not source.get("optional"):
                raise ContainerConfigError(f'configmap "{source["name"]}" not found')
            write_configmap_volume(local[name], source, files or {})
    return local


async def mount_volumes(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    pod_dir: Path,
    host_path: Callable[[str], Path],
    read_configmap: ConfigMapFilesReader,
) -> dict[str, Path]:
    """mountPath -> the local directory standing for it (created)."""
    volumes = await _volume_dirs(
        (pod.get("spec") or {}).get("volumes") or [],
        pod_dir=pod_dir,
        host_path=host_path,
        read_configmap=read_configmap,
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
