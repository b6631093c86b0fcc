"""One pod on the test kubelet: take its IP, run its init containers to completion (when the
runtime runs them) and then its first container through the kubelet's runtime (a local process,
or podman), probe it, restart it per `restartPolicy` with a doubling back-off, report `status`
(phase, conditions, init/containerStatuses, podIP) through the API, and on deletion SIGTERM it,
wait up to the grace period, SIGKILL, then delete the pod object with grace 0."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any

from tests.fakes.kube_resources import now_time
from tests.fakes.kubelet_container import ContainerConfigError
from tests.fakes.kubelet_probes import ContainerProber
from tests.fakes.kubelet_runtime import Container, PodSandbox
from tests.fakes.kubelet_status import (
    Conditions,
    addresses,
    container_status,
    init_container_statuses,
)
from tests.fakes.kubelet_volumes import container_ports

if TYPE_CHECKING:
    from tests.fakes.kubelet import LocalKubelet

__all__ = ["PodWorker"]

logger = logging.getLogger(__name__)


class PodWorker:
    """The kubelet's loop for one pod (by uid), on the kubelet's event loop."""

    def __init__(self, kubelet: LocalKubelet, pod: dict[str, Any]) -> None:
        self.kubelet = kubelet
        self.pod = pod
        meta = pod["metadata"]
        self.uid, self.namespace, self.name = meta["uid"], meta["namespace"], meta["name"]
        self.container: dict[str, Any] = (pod["spec"].get("containers") or [{}])[0]
        self.runtime = kubelet.runtime
        self.init_specs: list[dict[str, Any]] = list(pod["spec"].get("initContainers") or [])
        self.init_states: list[dict[str, Any]] = [
            {"waiting": {"reason": "PodInitializing"}} for _ in self.init_specs
        ]
        self.init_restarts = [0 for _ in self.init_specs]
        self.initialized = not (self.runtime.runs_init_containers and self.init_specs)
        self.pod_dir = kubelet.config.root / "pods" / self.uid
        self.ip: str | None = None
        self.phase = "Pending"
        self.ready = self.started = False
        self.restarts = 0
        self.state: dict[str, Any] = {"waiting": {"reason": "ContainerCreating"}}
        self.last_state: dict[str, Any] = {}
        self.start_time: str | None = None
        self._container: Container | None = None
        self._sandbox: PodSandbox | None = None
        self._terminate = asyncio.Event()
        self._gone = False  # the object is deleted: nothing to report or delete any more
        self._stop_grace_s: float | None = None  # set by shutdown(): no API calls
        self._report_lock = asyncio.Lock()
        self._last_sent: dict[str, Any] | None = None
        self._conditions = Conditions()
        self._task: asyncio.Task[None] | None = None

    # --- control from the kubelet ----------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())
        self._task.add_done_callback(self.kubelet.note_task_end)
        self.observe(self.pod)

    def observe(self, pod: dict[str, Any]) -> None:
        self.pod = pod
        if pod["metadata"].get("deletionTimestamp"):
            self._terminate.set()

    def removed(self) -> None:
        """The object vanished (force delete): kill at once, report nothing."""
        self._gone = True
        self._stop_grace_s = 0.0
        self._terminate.set()

    async def shutdown(self, grace_s: float) -> None:
        self._stop_grace_s = grace_s
        self._terminate.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    def kill_now(self) -> None:
        if self._container is not None:
            self._container.kill_now()

    @property
    def pid(self) -> int | None:
        """The local process of the running container (podman: its client), or None."""
        return self._container.pid if self._container is not None else None

    # --- the pod's life --------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            await self._live()
        except ContainerConfigError as exc:
            logger.warning("pod %s/%s cannot start: %s", self.namespace, self.name, exc)
            self.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
            await self._report()
            await self._terminate.wait()
        finally:
            await self._stop_container()
            await self._finish()

    async def _live(self) -> None:
        self._sandbox = await self._prepare()
        if not self.initialized and not await self._initialize():
            return
        self.initialized = True
        await self._run_main()

    async def _run_main(self) -> None:
        backoff, max_backoff = self.kubelet.config.restart_backoff_s
        while not self._terminate.is_set():
            await self._start_container()
            if await self._supervise() == "terminate":
                return
            code = await self._stop_container()
            policy = self.pod["spec"].get("restartPolicy", "Always")
            if policy == "Never" or (policy == "OnFailure" and code == 0):
                self.phase = "Succeeded" if code == 0 else "Failed"
                self.state, self.ready = self.last_state, False
                self.last_state = {}
                await self._report()
                await self._terminate.wait()
                return
            self.restarts += 1
            self.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {backoff:g}s restarting failed "
                    f"container={self.container.get('name')}",
                }
            }
            await self._report()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._terminate.wait(), backoff)
            backoff = min(backoff * 2, max_backoff)

    async def _initialize(self) -> bool:
        """Run the init containers in order, each to a zero exit (retried with back-off, as
        `Init:CrashLoopBackOff`; `restartPolicy: Never` fails the pod). False: stop here."""
        assert self._sandbox is not None
        backoff, max_backoff = self.kubelet.config.restart_backoff_s
        self.state = {"waiting": {"reason": "PodInitializing"}}
        for index, spec in enumerate(self.init_specs):
            restarts = 0
            while not self._terminate.is_set():
                self.init_states[index] = {"running": {"startedAt": now_time()}}
                self.phase = "Pending"
                await self._report()
                container = await self.runtime.create(self._sandbox, spec, restart=restarts)
                self._container = container
                code = await self._run_to_exit(container)
                self._container = None
                if code is None:  # terminated while it ran
                    return False
                finished = {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}
                self.init_states[index] = {"terminated": {**finished, "finishedAt": now_time()}}
                if code == 0:
                    break
                if self.pod["spec"].get("restartPolicy", "Always") == "Never":
                    self.phase = "Failed"
                    await self._report()
                    await self._terminate.wait()
                    return False
                restarts += 1
                self.init_restarts[index] = restarts
                await self._report()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._terminate.wait(), backoff)
                backoff = min(backoff * 2, max_backoff)
            if self._terminate.is_set():
                return False
        return True

    async def _run_to_exit(self, container: Container) -> int | None:
        """Start `container` and wait for its exit code (None: the pod was deleted first)."""
        with self._log() as log:
            try:
                await container.start(log)
            except OSError as exc:
                log.write(f"test kubelet: cannot start an init container: {exc}\n".encode())
                return 128
        waiting = asyncio.create_task(container.wait())
        ending = asyncio.create_task(self._terminate.wait())
        try:
            await asyncio.wait({waiting, ending}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ending.cancel()
        if waiting.done():
            return waiting.result()
        waiting.cancel()
        await container.stop(
            self._stop_grace_s if self._stop_grace_s is not None else self._grace_s()
        )
        return None

    async def _prepare(self) -> PodSandbox:
        self.ip = self.kubelet.allocate_ip(container_ports(self.container))
        pod = {**self.pod, "status": {**(self.pod.get("status") or {}), **addresses(self.ip)}}
        return PodSandbox(
            pod=pod,
            pod_dir=self.pod_dir,
            host_path=self.kubelet.host_path,
            read_configmap=self._read_configmap,
            read_volume_files=self._read_volume_files,
        )

    async def _read_configmap(self, name: str) -> dict[str, str] | None:
        found = await self._read_object("configMap", name)
        return None if found is None else dict(found.data or {})

    async def _read_volume_files(self, kind: str, name: str) -> dict[str, bytes] | None:
        """A configMap or secret volume's files: a ConfigMap's `data` as UTF-8 and its
        `binaryData` decoded, a Secret's `data` decoded (the API sends both base64)."""
        found = await self._read_object(kind, name)
        if found is None:
            return None
        if kind == "secret":
            return {k: base64.b64decode(v) for k, v in (found.data or {}).items()}
        files = {k: v.encode() for k, v in (found.data or {}).items()}
        files.update({k: base64.b64decode(v) for k, v in (found.binary_data or {}).items()})
        return files

    async def _read_object(self, kind: str, name: str) -> Any:
        """The pod namespace's ConfigMap ("configMap") or Secret ("secret"); None on 404."""
        from kubernetes_asyncio.client import ApiException

        core = self.kubelet.core
        assert core is not None
        read = core.read_namespaced_secret if kind == "secret" else core.read_namespaced_config_map
        try:
            return await read(name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise ContainerConfigError(f"reading {kind} {name!r}: HTTP {exc.status}") from exc

    def _log(self) -> IO[bytes]:
        log_path = self.kubelet.log_path(self.namespace, self.name)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        return log_path.open("ab")

    async def _start_container(self) -> None:
        assert self._sandbox is not None
        self.ready = self.started = False
        container = await self.runtime.create(self._sandbox, self.container, restart=self.restarts)
        with self._log() as log:
            try:
                await container.start(log)
            except OSError as exc:
                why = f"test kubelet: cannot start {self.container.get('name')}: {exc}\n"
                log.write(why.encode())
                self._container = None
                self.state = {
                    "terminated": {
                        "exitCode": 128,
                        "reason": "StartError",
                        "message": str(exc),
                        "finishedAt": now_time(),
                    }
                }
                return
        self._container = container
        self.start_time = self.start_time or now_time()
        self.phase = "Running"
        self.state = {"running": {"startedAt": now_time()}}
        await self._report()

    async def _supervise(self) -> str:
        """Wait for the container to exit, a liveness/startup failure, or deletion."""
        if self._container is None:
            return "exited"
        failed = asyncio.Event()
        probes = asyncio.create_task(self._probe(failed))
        waits = {
            asyncio.create_task(self._container.wait()): "exited",
            asyncio.create_task(failed.wait()): "unhealthy",
            asyncio.create_task(self._terminate.wait()): "terminate",
        }
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in [*waits, probes]:
                task.cancel()
            await asyncio.gather(*waits, probes, return_exceptions=True)
        return waits[next(iter(done))]

    async def _probe(self, failed: asyncio.Event) -> None:
        assert self.kubelet.probe_session is not None and self.ip is not None
        container = self._container

        async def exec_in(argv: Sequence[str], timeout_s: float) -> bool:
            return container is not None and await container.exec(argv, timeout_s)

        async def changed(started: bool, ready: bool) -> None:
            self.started, self.ready = started, ready
            await self._report()

        prober = ContainerProber(
            self.container,
            period_s=self.kubelet.config.probe_period_s,
            pod_ip=self.ip,
            session=self.kubelet.probe_session,
            exec_in=exec_in,
            on_change=changed,
            who=f"pod {self.namespace}/{self.name}",
        )
        await prober.run(failed)

    async def _stop_container(self) -> int | None:
        """SIGTERM, SIGKILL after the grace period; the exit code."""
        container = self._container
        if container is None:
            return None
        grace = self._stop_grace_s if self._stop_grace_s is not None else self._grace_s()
        code = await container.stop(grace)
        self.last_state = {
            "terminated": {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": (self.state.get("running") or {}).get("startedAt"),
                "finishedAt": now_time(),
                **({"containerID": container.container_id} if container.container_id else {}),
            }
        }
        self.state = {"terminated": self.last_state["terminated"]}
        self.ready = False
        self._container = None
        return code

    def _grace_s(self) -> float:
        meta, spec = self.pod["metadata"], self.pod["spec"]
        grace = meta.get("deletionGracePeriodSeconds")
        return float(grace if grace is not None else spec.get("terminationGracePeriodSeconds", 30))

    async def _finish(self) -> None:
        from kubernetes_asyncio.client import ApiException, V1DeleteOptions, V1Preconditions

        try:
            if not self._gone and self._stop_grace_s is None and self.kubelet.core is not None:
                self.ready = False
                exit_code = (self.state.get("terminated") or {}).get("exitCode", 0)
                if self.phase not in ("Succeeded", "Failed"):
                    self.phase = "Succeeded" if exit_code == 0 else "Failed"
                await self._report()
                with contextlib.suppress(ApiException):  # 404/409: already gone or replaced
                    await self.kubelet.core.delete_namespaced_pod(
                        self.name,
                        self.namespace,
                        grace_period_seconds=0,
                        body=V1DeleteOptions(
                            grace_period_seconds=0, preconditions=V1Preconditions(uid=self.uid)
                        ),
                    )
        finally:
            if self._sandbox is not None:
                self.runtime.release(self._sandbox)
            self.kubelet.release_ip(self.ip)
            self.kubelet.forget(self)

    # --- status ----------------------------------------------------------------------------

    def _status(self) -> dict[str, Any]:
        running = self._container
        container = container_status(
            self.container,
            scheme=self.runtime.scheme,
            ready=self.ready,
            started=self.started,
            restarts=self.restarts,
            state=self.state,
            last_state=self.last_state,
            container_id=running.container_id if running and self.initialized else None,
        )
        inits = init_container_statuses(
            self.init_specs, self.init_states, self.init_restarts, scheme=self.runtime.scheme
        )
        shown = inits and self.runtime.runs_init_containers
        return {
            "phase": self.phase,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastProbeTime": None},
                self._conditions.condition("Initialized", self.initialized),
                self._conditions.condition("ContainersReady", self.ready),
                self._conditions.condition("Ready", self.ready),
            ],
            "containerStatuses": [container],
            **({"initContainerStatuses": inits} if shown else {}),
            "startTime": self.start_time,
            "qosClass": "BestEffort",
            **(addresses(self.ip) if self.ip else {}),
        }

    async def _report(self) -> None:
        """Patch `status` when it changed; retried a few times (the API may be faulty)."""
        from kubernetes_asyncio.client import ApiException

        if self._gone or self._stop_grace_s is not None or self.kubelet.core is None:
            return
        async with self._report_lock:
            status = self._status()
            if status == self._last_sent:
                return
            for attempt in range(5):
                try:
                    await self.kubelet.core.patch_namespaced_pod_status(
                        self.name, self.namespace, {"status": status}
                    )
                    self._last_sent = status
                    return
                except ApiException as exc:
                    if exc.status == 404:
                        self._gone = True
                        return
                    logger.warning(
                        "pod %s/%s status patch failed: %s", self.namespace, self.name, exc.status
                    )
                    await asyncio.sleep(0.1 * (attempt + 1))
