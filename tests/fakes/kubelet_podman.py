"""The test kubelet's podman runtime: each container runs from the built Thaw image
(`THAW_TEST_IMAGE`) with rootful podman, as a kubelet with containerd would run it.

- Network: the host's (`--network host`); the pod binds its own loopback pod IP. A wildcard
  `0.0.0.0` in args/env is that IP (pods share one network namespace here, so two pods on
  0.0.0.0:8000 would collide; in a cluster each pod has its own).
- Volumes are bind-mounted at their real mountPaths (`subPath`, `readOnly`): emptyDir is a
  directory of the pod, 0777 or, with `fsGroup`, group-owned by it with setgid (2777), as the
  kubelet leaves it; `medium: Memory` lives on the host's /dev/shm; configMap and secret
  volumes are files (`items`, `defaultMode`/`mode`; with `fsGroup` group-owned by it and group
  readable, as the kubelet's volume ownership leaves them, so a 0440 secret is readable by the
  pod's non-root user), always read-only; hostPath is the host directory as it is (the
  kubelet's mapping), created root-owned 0755 by `DirectoryOrCreate` as a kubelet does.
- Security: `runAsUser`/`runAsGroup` -> `--user`, `fsGroup` + `supplementalGroups` ->
  `--group-add`, `runAsNonRoot` checked against the uid (the image's USER when unset),
  `readOnlyRootFilesystem` -> `--read-only --read-only-tmpfs=false` (no writable /tmp unless a
  volume is mounted there), capabilities -> `--cap-drop`/`--cap-add`,
  `allowPrivilegeEscalation: false` -> no-new-privileges, `privileged`, seccomp Unconfined.
- `command` replaces the image's ENTRYPOINT and `args` its CMD; env as the process runtime
  resolves it (no host variables leak in: only the pod's, `HOSTNAME` and `extra_env`);
  `extra_mounts` bind extra host files (a kubeconfig standing for the service-account token).
- Exec probes run inside the container (`podman exec`). Every container carries the label
  `thaw.test/kubelet=<run id>` (unique per kubelet) and a unique name; a stopped container is
  removed (`--rm`), and `cleanup()` (kubelet stop, interpreter exit) removes every one left.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import logging
import os
import shutil
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tests.fakes.kubelet_container import ContainerConfigError, declared_env, expand, own_address
from tests.fakes.kubelet_runtime import Container, PodSandbox, exit_code
from tests.fakes.kubelet_volumes import (
    object_volume_kind,
    referenced_configmaps,
    set_volume_ownership,
    unsupported_volume,
    write_object_volume,
)

__all__ = ["PodmanConfig", "PodmanRuntime", "SecurityOptions", "podman_missing", "security_options"]

logger = logging.getLogger(__name__)

RUN_LABEL = "thaw.test/kubelet"
_LIVE_RUNTIMES: set[PodmanRuntime] = set()


def podman_missing(image: str | None) -> str | None:
    """Why podman mode cannot run here (None: it can): no podman, or no image named."""
    if shutil.which("podman") is None:
        return "podman is not installed"
    if not image:
        return "THAW_TEST_IMAGE is not set (make test-image builds the image and sets it)"
    return None


@dataclass(frozen=True)
class PodmanConfig:
    """`image` runs every container (whatever image the pod names: a registry mirror);
    `extra_mounts` maps container paths to host files bound read-only into every container;
    `podman` is the executable (its environment, CONTAINERS_CONF included, is this process's)."""

    image: str
    extra_mounts: Mapping[str, Path] = field(default_factory=dict)
    podman: str = "podman"
    shm_root: Path = Path("/dev/shm")
    command_timeout_s: float = 60.0


@dataclass(frozen=True)
class _Volume:
    host: Path
    read_only: bool  # configMap and secret volumes are always read-only


@dataclass(frozen=True)
class SecurityOptions:
    """What `podman run` gets for a security context."""

    user: str | None  # --user uid[:gid]; None: the image's USER
    groups: tuple[int, ...]
    flags: tuple[str, ...]


def security_options(
    pod_security: Mapping[str, Any], container: Mapping[str, Any], image_user: str
) -> SecurityOptions:
    """The podman flags for a container's effective security context (the pod's, overridden
    by the container's); `image_user` is the image's USER. ContainerConfigError when
    `runAsNonRoot` forbids the user, as the kubelet refuses it."""
    ctx = {**pod_security, **(container.get("securityContext") or {})}
    uid, gid = ctx.get("runAsUser"), ctx.get("runAsGroup")
    user = None
    if uid is not None:
        user = f"{uid}:{gid}" if gid is not None else str(uid)
    elif gid is not None:
        user = f"{image_user.split(':')[0] or 0}:{gid}"
    effective = str(uid) if uid is not None else (image_user.split(":")[0] or "0")
    if ctx.get("runAsNonRoot") and effective in ("0", "root"):
        raise ContainerConfigError("container has runAsNonRoot and image will run as root")
    if ctx.get("runAsNonRoot") and not effective.isdigit():
        raise ContainerConfigError(
            f"container has runAsNonRoot and image has non-numeric user ({effective}), "
            "cannot verify user is non-root"
        )
    groups = [*pod_security.get("supplementalGroups", [])]
    if pod_security.get("fsGroup") is not None:
        groups.append(pod_security["fsGroup"])
    flags: list[str] = []
    if ctx.get("readOnlyRootFilesystem"):
        flags += ["--read-only", "--read-only-tmpfs=false"]
    caps = ctx.get("capabilities") or {}
    flags += [f"--cap-drop={c}" for c in caps.get("drop") or []]
    flags += [f"--cap-add={c}" for c in caps.get("add") or []]
    if ctx.get("allowPrivilegeEscalation") is False:
        flags += ["--security-opt=no-new-privileges"]
    if ctx.get("privileged"):
        flags += ["--privileged"]
    if (ctx.get("seccompProfile") or {}).get("type") == "Unconfined":
        flags += ["--security-opt=seccomp=unconfined"]
    return SecurityOptions(user, tuple(int(g) for g in groups), tuple(flags))


class PodmanContainer:
    """One `podman run --rm` (attached: its exit status is the container's)."""

    def __init__(self, runtime: PodmanRuntime, name: str, argv: Sequence[str]) -> None:
        self.name = name
        self._runtime = runtime
        self._argv = tuple(argv)
        self._proc: asyncio.subprocess.Process | None = None

    @property
    def container_id(self) -> str | None:
        return f"podman://{self.name}" if self._proc is not None else None

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.returncode is None else None

    async def start(self, log: IO[bytes]) -> None:
        self._proc = await asyncio.create_subprocess_exec(
            *self._argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    async def wait(self) -> int:
        assert self._proc is not None
        code = exit_code(await self._proc.wait())
        # The client may die without its container (killed by a test): remove it, so no
        # container outlives its run and a restart never meets its predecessor on the pod IP.
        await self._runtime.podman("rm", "--force", "--time=0", "--ignore", self.name)
        return code

    async def stop(self, grace_s: float) -> int:
        proc = self._proc
        assert proc is not None
        if proc.returncode is None:
            await self._runtime.podman("kill", "--signal=TERM", self.name)
            try:
                await asyncio.wait_for(proc.wait(), max(grace_s, 0.0))
            except TimeoutError:
                await self._runtime.podman("rm", "--force", "--time=0", self.name)
                try:
                    await asyncio.wait_for(proc.wait(), self._runtime.config.command_timeout_s)
                except TimeoutError:  # the client hangs: the container is gone anyway
                    proc.kill()
                    await proc.wait()
        return exit_code(proc.returncode)

    async def exec(self, argv: Sequence[str], timeout_s: float) -> bool:
        podman = self._runtime.config.podman
        proc = await asyncio.create_subprocess_exec(
            podman,
            "exec",
            self.name,
            *argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            return await asyncio.wait_for(proc.wait(), timeout_s) == 0
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return False

    def kill_now(self) -> None:
        if self._proc is not None:
            self._runtime.remove_sync([self.name])


class PodmanRuntime:
    """Containers from `config.image` with podman, named `thaw-<run>-<pod>-<container>-<n>`."""

    scheme = "podman"
    runs_init_containers = True

    def __init__(self, config: PodmanConfig, *, extra_env: Mapping[str, str]) -> None:
        self.config = config
        self.run_id = uuid.uuid4().hex[:10]
        self._extra_env = dict(extra_env)
        self._image_user: str | None = None
        _LIVE_RUNTIMES.add(self)

    # --- podman calls ----------------------------------------------------------------------

    async def podman(self, *args: str) -> tuple[int, str]:
        """Run one podman command; (exit status, stdout + stderr)."""
        proc = await asyncio.create_subprocess_exec(
            self.config.podman,
            *args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), self.config.command_timeout_s)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return -1, f"podman {args[0]} timed out"
        return proc.returncode or 0, out.decode(errors="replace")

    def remove_sync(self, names: Sequence[str]) -> None:
        if names:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                subprocess.run(
                    [self.config.podman, "rm", "--force", "--time=0", "--ignore", *names],
                    capture_output=True,
                    timeout=self.config.command_timeout_s,
                )

    @property
    def shm_dir(self) -> Path:
        """This run's memory-backed emptyDirs: one directory a pod below it."""
        return self.config.shm_root / f"thaw-kubelet-{self.run_id}"

    def cleanup(self) -> None:
        """Remove every container of this run (running or not), and its shm directory."""
        _LIVE_RUNTIMES.discard(self)
        shutil.rmtree(self.shm_dir, ignore_errors=True)
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            listed = subprocess.run(
                [self.config.podman, "ps", "--all", "--quiet", f"--filter=label={RUN_LABEL}="
                 f"{self.run_id}"],
                capture_output=True,
                text=True,
                timeout=self.config.command_timeout_s,
            )  # fmt: skip
            self.remove_sync(listed.stdout.split())

    async def image_user(self) -> str:
        """The image's USER (`uid[:gid]`, "" for root), read once."""
        if self._image_user is None:
            code, out = await self.podman(
                "image", "inspect", "--format", "{{.Config.User}}", self.config.image
            )
            if code != 0:
                raise ContainerConfigError(f"image {self.config.image!r}: {out.strip()}")
            self._image_user = out.strip()
        return self._image_user

    # --- the pod's volumes (once per pod, shared by its containers) ------------------------

    async def _volumes(self, sandbox: PodSandbox) -> dict[str, _Volume]:
        if "volumes" in sandbox.prepared:
            return dict(sandbox.prepared["volumes"])
        spec = sandbox.pod.get("spec") or {}
        fs_group = (spec.get("securityContext") or {}).get("fsGroup")
        volumes: dict[str, _Volume] = {}
        for volume in spec.get("volumes") or []:
            name = volume["name"]
            if "emptyDir" in volume:
                memory = (volume["emptyDir"] or {}).get("medium") == "Memory"
                base = (
                    self.shm_dir / sandbox.pod_dir.name if memory else sandbox.pod_dir / "volumes"
                )
                host = base / name
                host.mkdir(parents=True, exist_ok=True)
                if memory:
                    sandbox.prepared.setdefault("remove", []).append(base)
                host.chmod(0o777)
                if fs_group is not None:
                    os.chown(host, -1, int(fs_group))
                    host.chmod(0o2777)
                volumes[name] = _Volume(host, read_only=False)
            elif object_volume_kind(volume):
                host = sandbox.pod_dir / "volumes" / name
                host.mkdir(parents=True, exist_ok=True)
                await write_object_volume(host, volume, sandbox.read_volume_files)
                if fs_group is not None:
                    set_volume_ownership(host, int(fs_group), read_only=True)
                volumes[name] = _Volume(host, read_only=True)
            elif "hostPath" in volume:
                volumes[name] = _Volume(
                    sandbox.host_path(volume["hostPath"]["path"]), read_only=False
                )
            else:
                raise unsupported_volume(volume)
        sandbox.prepared["volumes"] = volumes
        return dict(volumes)

    def release(self, sandbox: PodSandbox) -> None:
        """The pod is gone: remove what it kept outside its directory."""
        for path in sandbox.prepared.get("remove", []):
            shutil.rmtree(path, ignore_errors=True)

    # --- one container ---------------------------------------------------------------------

    async def create(
        self, sandbox: PodSandbox, container: Mapping[str, Any], *, restart: int
    ) -> Container:
        pod = sandbox.pod
        meta, spec = pod["metadata"], pod.get("spec") or {}
        pod_ip = (pod.get("status") or {}).get("podIP") or ""
        volumes = await self._volumes(sandbox)
        configmaps = await referenced_configmaps(container, sandbox.read_configmap)
        declared = declared_env(pod, container, configmaps.get)
        pod_security = spec.get("securityContext") or {}
        security = security_options(pod_security, container, await self.image_user())
        name = f"thaw-{self.run_id}-{meta['name']}-{container['name']}-{restart}"
        argv = [
            self.config.podman, "run", "--rm", "--pull=never", f"--name={name}",
            f"--label={RUN_LABEL}={self.run_id}", "--network=host",
        ]  # fmt: skip
        if security.user is not None:
            argv.append(f"--user={security.user}")
        argv += [f"--group-add={g}" for g in security.groups]
        argv += security.flags
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(mount["name"])
            if volume is None:
                raise ContainerConfigError(f"volumeMount {mount['name']!r} names no volume")
            host = volume.host / mount.get("subPath", "")
            host.mkdir(parents=True, exist_ok=True)
            read_only = volume.read_only or bool(mount.get("readOnly"))
            argv.append(f"--volume={host}:{mount['mountPath']}:{'ro' if read_only else 'rw'}")
        for target, source in self.config.extra_mounts.items():
            argv.append(f"--volume={source}:{target}:ro")
        env = {"HOSTNAME": meta["name"], **self._extra_env}
        env.update({k: own_address(v, pod_ip) for k, v in declared.items()})
        argv += [f"--env={k}={v}" for k, v in env.items()]
        if container.get("workingDir"):
            argv.append(f"--workdir={container['workingDir']}")
        command = [own_address(expand(str(c), declared.get), pod_ip) for c in
                   container.get("command") or []]  # fmt: skip
        args = [own_address(expand(str(a), declared.get), pod_ip) for a in
                container.get("args") or []]  # fmt: skip
        if command:
            argv.append(f"--entrypoint={json.dumps(command)}")
        argv += [self.config.image, *args]
        return PodmanContainer(self, name, argv)


@atexit.register
def _remove_leftovers() -> None:
    for runtime in list(_LIVE_RUNTIMES):
        runtime.cleanup()
