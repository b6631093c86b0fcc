"""How the test kubelet turns a pod's first container into a local process: the argv, the
environment and the working directory, resolved as a real kubelet would, then mapped onto this
machine.

- `env`: `value` with `$(VAR)` expansion over the variables defined before it; `valueFrom`
  `fieldRef` (metadata.name/namespace/uid, metadata.labels['k'], metadata.annotations['k'],
  spec.nodeName, spec.serviceAccountName, status.podIP(s), status.hostIP(s)) and
  `configMapKeyRef`; `envFrom` `configMapRef`. Secret env (`secretKeyRef`, `secretRef`) and
  resourceFieldRef are not supported (secret volumes are: `kubelet_volumes`).
- `command` + `args` with `$(VAR)` expansion (`$$` escapes); no `command` runs the image's
  entrypoint (`image_entrypoint`, default `thaw`); the executable is mapped through
  `entrypoints` (`thaw` -> this interpreter's `-m thaw.cli`, `python` -> this interpreter).
- A wildcard `0.0.0.0` argument or env value is the pod's IP (`own_address`).
- Volumes cannot be mounted, so each `volumeMounts[].mountPath` (with `subPath`) maps to a local
  directory, and a path argument that starts with a mountPath (`/models`, `/models/x`,
  `--repo=/models`) is rewritten to it; env values are rewritten likewise (each `:`-separated
  part). A path the program builds at run time from a mountPath is NOT rewritten.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "WILDCARD",
    "ContainerConfigError",
    "Launch",
    "declared_env",
    "expand",
    "own_address",
    "resolve_launch",
]

WILDCARD = "0.0.0.0"

_FIELD_KEY = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")


class ContainerConfigError(Exception):
    """The container cannot be started (the kubelet's CreateContainerConfigError)."""


@dataclass(frozen=True)
class Launch:
    """One process to start: argv, its whole environment, and where it runs."""

    argv: tuple[str, ...]
    env: dict[str, str]
    cwd: Path


def expand(text: str, lookup: Callable[[str], str | None]) -> str:
    """Kubernetes `$(VAR)` expansion: a defined VAR is substituted, an undefined one is left as
    written, and `$$` is a literal `$`."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
            continue
        if text.startswith("$(", i):
            end = text.find(")", i + 2)
            if end != -1:
                value = lookup(text[i + 2 : end])
                out.append(text[i : end + 1] if value is None else value)
                i = end + 1
                continue
        out.append(text[i])
        i += 1
    return "".join(out)


def own_address(text: str, pod_ip: str) -> str:
    """The wildcard address as an argument (`0.0.0.0`, `--host=0.0.0.0`) or env value is the
    pod's IP: every pod here shares the host's network namespace, where two pods binding
    0.0.0.0:8000 would collide; in a cluster each pod has its own."""
    if not pod_ip:
        return text
    if text == WILDCARD:
        return pod_ip
    if text.startswith("-") and text.endswith("=" + WILDCARD):
        return text[: -len(WILDCARD)] + pod_ip
    return text


def _field(pod: Mapping[str, Any], path: str) -> str:
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    keyed = _FIELD_KEY.match(path)
    if keyed:
        return str((meta.get(keyed.group(1)) or {}).get(keyed.group(2), ""))
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"),
        "status.podIPs": ",".join(i["ip"] for i in status.get("podIPs") or []),
        "status.hostIPs": ",".join(i["ip"] for i in status.get("hostIPs") or []),
    }
    if path not in simple:
        raise ContainerConfigError(f"unsupported fieldRef.fieldPath {path!r}")
    return str(simple[path] or "")


class _Mounts:
    """mountPath -> local directory, longest first, for rewriting path arguments."""

    def __init__(self, mounts: Mapping[str, Path]) -> None:
        self._mounts = sorted(
            ((p.rstrip("/") or "/", d) for p, d in mounts.items()), key=lambda item: -len(item[0])
        )

    def path(self, text: str) -> str:
        for mount, local in self._mounts:
            if text == mount:
                return str(local)
            if text.startswith(mount + "/"):
                return str(local / text[len(mount) + 1 :])
        return text

    def argument(self, text: str) -> str:
        if text.startswith("-") and "=" in text:
            flag, _, value = text.partition("=")
            return f"{flag}={self.path(value)}"
        return self.path(text)

    def env_value(self, text: str) -> str:
        return ":".join(self.path(part) for part in text.split(":"))


def declared_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    configmap: Callable[[str], Mapping[str, str] | None],
) -> dict[str, str]:
    """The container's `envFrom` + `env`, resolved in order (ContainerConfigError if not)."""
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        ref = source.get("configMapRef")
        if ref is None:
            raise ContainerConfigError("envFrom supports configMapRef only")
        data = configmap(ref["name"])
        if data is None and not ref.get("optional"):
            raise ContainerConfigError(f'configmap "{ref["name"]}" not found')
        prefix = source.get("prefix", "")
        env.update({prefix + k: v for k, v in (data or {}).items()})
    for var in container.get("env") or []:
        name, source = var["name"], var.get("valueFrom")
        if source is None:
            env[name] = expand(str(var.get("value", "")), env.get)
        elif "fieldRef" in source:
            env[name] = _field(pod, source["fieldRef"]["fieldPath"])
        elif "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            data = configmap(ref["name"])
            if (data is None or ref["key"] not in data) and not ref.get("optional"):
                raise ContainerConfigError(
                    f"couldn't find key {ref['key']} in ConfigMap "
                    f"{pod['metadata']['namespace']}/{ref['name']}"
                )
            if data is not None and ref["key"] in data:
                env[name] = data[ref["key"]]
        else:
            raise ContainerConfigError(
                f"env {name}: only fieldRef and configMapKeyRef valueFrom sources are supported"
            )
    return env


def resolve_launch(
    pod: Mapping[str, Any],
    *,
    container: Mapping[str, Any],
    mounts: Mapping[str, Path],
    base_env: Mapping[str, str],
    entrypoints: Mapping[str, Sequence[str]],
    image_entrypoint: Sequence[str],
    configmap: Callable[[str], Mapping[str, str] | None],
    default_cwd: Path,
) -> Launch:
    """The process for `container` of `pod` (whose status already carries its podIP)."""
    rewrite = _Mounts(mounts)
    declared = declared_env(pod, container, configmap)
    pod_ip = str((pod.get("status") or {}).get("podIP") or "")
    command = [str(c) for c in container.get("command") or image_entrypoint]
    args = [str(a) for a in container.get("args") or []]
    argv = [
        own_address(rewrite.argument(expand(part, declared.get)), pod_ip) for part in command + args
    ]
    if not argv:
        raise ContainerConfigError("the container has no command and the image no entrypoint")
    mapped = entrypoints.get(argv[0])
    if mapped is not None:
        argv = [*mapped, *argv[1:]]
    env = {**base_env, "HOSTNAME": pod["metadata"]["name"]}
    env.update({k: own_address(rewrite.env_value(v), pod_ip) for k, v in declared.items()})
    working_dir = container.get("workingDir")
    cwd = Path(rewrite.path(working_dir)) if working_dir else default_cwd
    if working_dir and cwd == Path(working_dir):
        raise ContainerConfigError(f"workingDir {working_dir!r} is not under a volume mount")
    return Launch(tuple(argv), env, cwd)
