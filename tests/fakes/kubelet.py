"""A test kubelet: schedules the fake API server's pods onto itself and runs each pod's first
container as a real local process (or, with `KubeletConfig.podman`, from the built image with
podman), reporting status through the API as a kubelet does.

It talks to the server only through kubernetes-asyncio (list + watch with re-list on 410, the
`binding` subresource, `pods/status` patches, a final delete with grace 0), on its own thread.
Conventions (see KUBERNETES.md): each pod gets its own loopback IP from a /24 of 127/8 picked per
kubelet, so every pod listens on its real container port; `thaw` runs this interpreter's
`-m thaw.cli`; volumes map to local directories (`kubelet_container`). Every process is started
in its own session and killed with its group on `stop()`, at interpreter exit, or when the
kubelet's thread dies (PR_SET_PDEATHSIG), so a failing test leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import shutil
import socket
import sys
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from tests.fakes.kubelet_container import ContainerConfigError
from tests.fakes.kubelet_pod import PodWorker
from tests.fakes.kubelet_podman import PodmanConfig, PodmanRuntime
from tests.fakes.kubelet_runtime import ContainerRuntime, ProcessRuntime

if TYPE_CHECKING:
    from kubernetes_asyncio.client import Configuration, CoreV1Api

__all__ = ["KubeletConfig", "LocalKubelet", "default_entrypoints"]

logger = logging.getLogger(__name__)


def default_entrypoints() -> dict[str, tuple[str, ...]]:
    """Image executables -> this machine's: `thaw` is this venv's Thaw CLI."""
    return {
        "thaw": (sys.executable, "-m", "thaw.cli"),
        "python": (sys.executable,),
        "python3": (sys.executable,),
    }


@dataclass(frozen=True)
class KubeletConfig:
    """`root` holds pod directories, logs and unmapped hostPaths; `host_paths` maps a hostPath
    (or a prefix of one) to a local directory; `probe_period_s` overrides every probe's
    periodSeconds; `restart_backoff_s` is (first, max) of the doubling restart back-off.
    `podman`: run containers from that image with podman (`kubelet_podman`) instead of as
    local processes (`entrypoints`, `image_entrypoint` and `passthrough_env` are then unused)."""

    root: Path
    node_name: str = "thaw-node-1"
    host_paths: Mapping[str, Path] = field(default_factory=dict)
    entrypoints: Mapping[str, tuple[str, ...]] = field(default_factory=default_entrypoints)
    image_entrypoint: tuple[str, ...] = ("thaw",)
    extra_env: Mapping[str, str] = field(default_factory=dict)
    passthrough_env: tuple[str, ...] = (
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "TMPDIR",
        "PYTHONPATH",
        "VIRTUAL_ENV",
    )
    probe_period_s: float | None = None
    restart_backoff_s: tuple[float, float] = (0.2, 3.0)
    pod_ip_block: str | None = None
    stop_grace_s: float = 3.0
    watch_timeout_s: int = 60
    scheduler_name: str = "default-scheduler"
    schedule: bool = True
    start_timeout_s: float = 10.0
    podman: PodmanConfig | None = None


class LocalKubelet:
    """One node. `start()` / `stop()` or `with LocalKubelet(...) as kubelet:`."""

    def __init__(self, api: Configuration, config: KubeletConfig) -> None:
        self.config = config
        self.ip_block = (
            config.pod_ip_block or f"127.{random.randint(1, 254)}.{random.randint(0, 255)}"
        )
        self._api_config = api
        self.errors: list[str] = []
        self._workers: dict[str, PodWorker] = {}
        self._binding: set[str] = set()
        self._ips: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started: Future[None] = Future()
        self._stopping: asyncio.Event | None = None
        self.core: CoreV1Api | None = None
        self.probe_session: aiohttp.ClientSession | None = None
        self.base_env = {k: os.environ[k] for k in config.passthrough_env if k in os.environ}
        self.base_env.update(config.extra_env)
        self.runtime: ContainerRuntime = (
            PodmanRuntime(config.podman, extra_env=config.extra_env)
            if config.podman is not None
            else ProcessRuntime(
                base_env=self.base_env,
                entrypoints=config.entrypoints,
                image_entrypoint=config.image_entrypoint,
            )
        )

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> LocalKubelet:
        self.config.root.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(
            target=self._run, name=f"kubelet-{self.config.node_name}", daemon=True
        )
        self._thread.start()
        self._started.result(self.config.start_timeout_s)
        return self

    def stop(self) -> None:
        """Kill every pod process (SIGTERM, then SIGKILL after `stop_grace_s`); no API calls."""
        if self._loop is not None and self._stopping is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(self.config.stop_grace_s + 15)
        for worker in list(self._workers.values()):
            worker.kill_now()
        self.runtime.cleanup()
        self._thread = None
        if self.errors:
            raise RuntimeError(f"the test kubelet hit bugs of its own: {self.errors}")

    def __enter__(self) -> LocalKubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        except BaseException as exc:
            if not self._started.done():
                self._started.set_exception(exc)
            raise
        finally:
            loop.close()

    async def _main(self) -> None:
        from kubernetes_asyncio.client import ApiClient, CoreV1Api

        self._stopping = asyncio.Event()
        async with ApiClient(self._api_config) as api, aiohttp.ClientSession() as session:
            self.core, self.probe_session = CoreV1Api(api), session
            watcher = asyncio.create_task(self._watch_pods())
            watcher.add_done_callback(self.note_task_end)
            self._started.set_result(None)
            await self._stopping.wait()
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
            await asyncio.gather(
                *(w.shutdown(self.config.stop_grace_s) for w in list(self._workers.values()))
            )

    def note_task_end(self, task: asyncio.Task[None]) -> None:
        """A kubelet task that died of an exception is a bug: `stop()` raises it."""
        if not task.cancelled() and task.exception() is not None:
            logger.error("test kubelet task failed", exc_info=task.exception())
            self.errors.append(repr(task.exception()))

    # --- test-side views (thread-safe reads of plain attributes) ---------------------------

    def worker(self, namespace: str, name: str) -> PodWorker | None:
        for worker in list(self._workers.values()):
            if (worker.namespace, worker.name) == (namespace, name):
                return worker
        return None

    def pid(self, namespace: str, name: str) -> int | None:
        """The pod's running process id, or None."""
        worker = self.worker(namespace, name)
        return worker.pid if worker is not None else None

    def log_path(self, namespace: str, name: str) -> Path:
        return self.config.root / "logs" / f"{namespace}_{name}.log"

    def logs(self, namespace: str, name: str) -> str:
        """Everything the pod's process wrote (stdout and stderr), across restarts."""
        path = self.log_path(namespace, name)
        return path.read_text(errors="replace") if path.exists() else ""

    # --- node resources --------------------------------------------------------------------

    def allocate_ip(self, ports: set[int]) -> str:
        """A loopback IP of this kubelet's block where every port in `ports` is free."""
        for last in range(2, 255):
            ip = f"{self.ip_block}.{last}"
            if ip not in self._ips and all(_bindable(ip, port) for port in ports):
                self._ips.add(ip)
                return ip
        raise ContainerConfigError(f"no free pod IP in {self.ip_block}.0/24")

    def release_ip(self, ip: str | None) -> None:
        self._ips.discard(ip or "")

    def host_path(self, path: str) -> Path:
        """The local directory (or file) standing for hostPath `path` (a directory created if
        missing, as `DirectoryOrCreate`: 0755, owned by this kubelet's user)."""
        path = "/" + path.strip("/")
        for prefix in sorted(self.config.host_paths, key=len, reverse=True):
            norm = "/" + prefix.strip("/")
            if path == norm or path.startswith(norm.rstrip("/") + "/"):
                local = self.config.host_paths[prefix] / path[len(norm) :].lstrip("/")
                break
        else:
            local = self.config.root / "hostpath" / path.lstrip("/")
        if not local.is_file():
            local.mkdir(mode=0o755, parents=True, exist_ok=True)
        return local

    def forget(self, worker: PodWorker) -> None:
        self._workers.pop(worker.uid, None)
        shutil.rmtree(worker.pod_dir, ignore_errors=True)

    # --- the pod watch ---------------------------------------------------------------------

    async def _watch_pods(self) -> None:
        from kubernetes_asyncio.client import ApiException
        from kubernetes_asyncio.watch import Watch

        assert self.core is not None
        while True:
            try:
                # Raw JSON: the kubelet works on plain dicts, as the watch's raw_object.
                response: Any = await self.core.list_pod_for_all_namespaces(_preload_content=False)
                listed = json.loads(await response.read())
                if response.status != 200:
                    raise ApiException(status=response.status, reason=listed.get("message"))
                version = listed["metadata"]["resourceVersion"]
                present = {pod["metadata"]["uid"] for pod in listed["items"]}
                for worker in list(self._workers.values()):
                    if worker.uid not in present:  # deleted while the watch was down
                        worker.removed()
                for pod in listed["items"]:
                    self._on_pod("ADDED", pod)
                while True:  # watch until 410, then re-list
                    async with Watch() as watch:
                        async for event in watch.stream(
                            self.core.list_pod_for_all_namespaces,
                            resource_version=version,
                            timeout_seconds=self.config.watch_timeout_s,
                            allow_watch_bookmarks=True,
                        ):
                            if event["type"] != "BOOKMARK":
                                self._on_pod(event["type"], event["raw_object"])
                        version = watch.resource_version or version
            except ApiException as exc:
                if exc.status != 410:
                    logger.warning("kubelet pod watch failed: %s %s", exc.status, exc.reason)
                    await asyncio.sleep(0.2)
            except (aiohttp.ClientError, TimeoutError) as exc:
                logger.warning("kubelet pod watch interrupted: %r", exc)
                await asyncio.sleep(0.2)

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        worker = self._workers.get(meta["uid"])
        if kind == "DELETED":
            if worker is not None:
                worker.removed()
            return
        node = spec.get("nodeName")
        if not node:
            if (
                self.config.schedule
                and not meta.get("deletionTimestamp")
                and spec.get("schedulerName") == self.config.scheduler_name
                and meta["uid"] not in self._binding
            ):
                self._binding.add(meta["uid"])
                asyncio.get_running_loop().create_task(self._bind(pod))
            return
        if node != self.config.node_name:
            return
        if worker is not None:
            worker.observe(pod)
            return
        finished = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        if finished and not meta.get("deletionTimestamp"):
            return
        worker = PodWorker(self, pod)
        self._workers[meta["uid"]] = worker
        worker.start()

    async def _bind(self, pod: dict[str, Any]) -> None:
        from kubernetes_asyncio.client import V1Binding, V1ObjectMeta, V1ObjectReference

        assert self.core is not None
        meta = pod["metadata"]
        body = V1Binding(
            metadata=V1ObjectMeta(name=meta["name"], namespace=meta["namespace"]),
            target=V1ObjectReference(api_version="v1", kind="Node", name=self.config.node_name),
        )
        try:
            for attempt in range(5):  # a scheduler retries a failed bind
                # The server answers a Binding with a Status, which the generated client cannot
                # deserialize into V1Binding (target is required): read the raw response.
                try:
                    response: Any = await self.core.create_namespaced_pod_binding(
                        meta["name"], meta["namespace"], body, _preload_content=False
                    )
                except aiohttp.ClientError as exc:
                    logger.warning(
                        "binding pod %s/%s failed: %r", meta["namespace"], meta["name"], exc
                    )
                else:
                    response.release()
                    if response.status in (200, 201, 404, 409):  # bound, gone, or taken
                        return
                    logger.warning(
                        "binding pod %s/%s failed: HTTP %s",
                        meta["namespace"],
                        meta["name"],
                        response.status,
                    )
                await asyncio.sleep(0.1 * 2**attempt)
        finally:
            self._binding.discard(meta["uid"])


def _bindable(ip: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((ip, port))
        except OSError:
            return False
        return True
