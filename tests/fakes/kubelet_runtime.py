"""The test kubelet's container runtimes behind one seam: `ContainerRuntime.create()` turns a
pod's container into a `Container` the pod worker starts, waits on, probes with `exec` and
stops. `ProcessRuntime` (the default) runs it as a local process of this checkout's venv;
`tests.fakes.kubelet_podman.PodmanRuntime` runs it from the built image with podman.

Both take the same `PodSandbox`: the pod (its status already carrying the pod IP), its
directory, how a hostPath maps onto this machine and how ConfigMaps and Secrets are read.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from tests.fakes.kubelet_container import Launch, resolve_launch
from tests.fakes.kubelet_process import die_with_parent, kill_group, track_group
from tests.fakes.kubelet_volumes import (
    ConfigMapReader,
    VolumeFilesReader,
    mount_volumes,
    referenced_configmaps,
)

__all__ = [
    "Container",
    "ContainerRuntime",
    "PodSandbox",
    "ProcessRuntime",
    "exit_code",
]


@dataclass(frozen=True)
class PodSandbox:
    """What every container of one pod shares: the pod (status with its addresses), its
    directory on this machine, the hostPath mapping, the ConfigMap reader (env) and the
    configMap/secret volume files reader."""

    pod: Mapping[str, Any]
    pod_dir: Path
    host_path: Callable[[str], Path]
    read_configmap: ConfigMapReader
    read_volume_files: VolumeFilesReader
    prepared: dict[str, Any] = field(default_factory=dict)  # per-runtime, e.g. volume dirs


class Container(Protocol):
    """One run of a container (a restart is a new `Container` from `create()`)."""

    @property
    def container_id(self) -> str | None:
        """`<runtime>://<id>` once started (containerStatuses[].containerID)."""

    @property
    def pid(self) -> int | None:
        """A local process standing for it (the process, or podman's client), while alive."""

    async def start(self, log: IO[bytes]) -> None:
        """Start it, its stdout and stderr into `log`; OSError when it cannot start."""

    async def wait(self) -> int:
        """Its exit code (128 + N when killed by signal N)."""

    async def stop(self, grace_s: float) -> int:
        """SIGTERM, up to `grace_s` to exit, then SIGKILL; the exit code."""

    async def exec(self, argv: Sequence[str], timeout_s: float) -> bool:
        """Run `argv` inside it (an exec probe): exit status 0 within `timeout_s`."""

    def kill_now(self) -> None:
        """Kill it at once, synchronously (teardown)."""


class ContainerRuntime(Protocol):
    """How the kubelet turns a container spec into something it runs."""

    scheme: str  # the containerID scheme
    runs_init_containers: bool

    async def create(
        self, sandbox: PodSandbox, container: Mapping[str, Any], *, restart: int
    ) -> Container:
        """Resolve `container` of the sandbox's pod (ContainerConfigError when it cannot be)."""

    def release(self, sandbox: PodSandbox) -> None:
        """The pod is gone: remove what it kept outside its directory."""

    def cleanup(self) -> None:
        """Remove everything this runtime started (synchronous; teardown and interpreter exit)."""


def exit_code(returncode: int | None) -> int:
    """A subprocess return code as Kubernetes reports it: killed by signal N -> 128 + N."""
    if returncode is None:
        return 137
    return 128 - returncode if returncode < 0 else returncode


class ProcessContainer:
    """A container as a local process leading its own process group."""

    def __init__(self, launch: Launch, exec_map: Mapping[str, Sequence[str]]) -> None:
        self.launch = launch
        self._exec_map = exec_map
        self._proc: asyncio.subprocess.Process | None = None

    @property
    def container_id(self) -> str | None:
        return f"thaw-local://{self._proc.pid}" if self._proc is not None else None

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.returncode is None else None

    async def start(self, log: IO[bytes]) -> None:
        self._proc = await asyncio.create_subprocess_exec(
            *self.launch.argv,
            env=self.launch.env,
            cwd=self.launch.cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        track_group(self._proc.pid, alive=True)

    async def wait(self) -> int:
        assert self._proc is not None
        return exit_code(await self._proc.wait())

    async def stop(self, grace_s: float) -> int:
        proc = self._proc
        assert proc is not None
        if proc.returncode is None:
            kill_group(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), grace_s)
            except TimeoutError:
                kill_group(proc.pid, signal.SIGKILL)
                await proc.wait()
        kill_group(proc.pid, signal.SIGKILL)  # anything the process left in its group
        track_group(proc.pid, alive=False)
        return exit_code(proc.returncode)

    async def exec(self, argv: Sequence[str], timeout_s: float) -> bool:
        mapped = self._exec_map.get(argv[0]) if argv else None
        full = (*mapped, *argv[1:]) if mapped else tuple(argv)
        try:
            proc = await asyncio.create_subprocess_exec(
                *full,
                env=dict(self.launch.env or os.environ),
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError:
            return False
        try:
            return await asyncio.wait_for(proc.wait(), timeout_s) == 0
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return False

    def kill_now(self) -> None:
        if self.pid is not None:
            kill_group(self.pid, signal.SIGKILL)


class ProcessRuntime:
    """Containers as local processes: `thaw` is this venv's CLI, volumes are directories whose
    mountPaths are rewritten in args and env (`kubelet_container`). Init containers are not
    run: a process on this machine would run them as this user, on this machine's paths."""

    scheme = "thaw-local"
    runs_init_containers = False

    def __init__(
        self,
        *,
        base_env: Mapping[str, str],
        entrypoints: Mapping[str, Sequence[str]],
        image_entrypoint: Sequence[str],
    ) -> None:
        self._base_env = base_env
        self._entrypoints = entrypoints
        self._image_entrypoint = image_entrypoint

    async def create(
        self, sandbox: PodSandbox, container: Mapping[str, Any], *, restart: int
    ) -> Container:
        launch = sandbox.prepared.get("launch")
        if launch is None:  # resolved once per pod: a restart runs the same process again
            mounts = await mount_volumes(
                sandbox.pod,
                container,
                pod_dir=sandbox.pod_dir,
                host_path=sandbox.host_path,
                read_files=sandbox.read_volume_files,
            )
            configmaps = await referenced_configmaps(container, sandbox.read_configmap)
            rootfs = sandbox.pod_dir / "rootfs"
            rootfs.mkdir(parents=True, exist_ok=True)
            launch = resolve_launch(
                sandbox.pod,
                container=container,
                mounts=mounts,
                base_env=self._base_env,
                entrypoints=self._entrypoints,
                image_entrypoint=self._image_entrypoint,
                configmap=configmaps.get,
                default_cwd=rootfs,
            )
            sandbox.prepared["launch"] = launch
        return ProcessContainer(launch, self._entrypoints)

    def release(self, sandbox: PodSandbox) -> None:
        """Nothing outside the pod's directory."""

    def cleanup(self) -> None:
        """Processes are killed by their workers and the kubelet_process atexit hook."""
