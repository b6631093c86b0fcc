"""Scaler backend that runs each replica as a local `thaw serve` process (`--scaler local`).

A `thaw.placement` shared model's replica is room in a process it shares with other models
instead (activator.scaler.local.shared_hosts); such replicas are only proxied to (no connection
handoff: the activator must see every request to know which shared model is idle).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp

from activator.config import ActivatorConfig, BoundAddresses
from activator.direct.handoff import HandoffLink
from activator.direct.orphans import LINGER_S, Outcome
from activator.errors import ActivationFailed
from activator.observe.metrics import Metrics
from activator.scaler.backend import (
    ModelActivity,
    PoolStatus,
    ReplicaHandle,
    SharedCounts,
    SharedReplicaStatus,
)
from activator.scaler.local.pool_policy import PoolPolicy
from activator.scaler.local.process_source import ForkSource, ProcessSource, SpawnSource
from activator.scaler.local.replica_process import ReplicaProcess
from activator.scaler.local.shared_hosts import SharedHosts
from activator.scaler.local.warm_pool import WarmPool
from activator.scaler.local_config import LocalConfig
from thawwire.handoff_protocol import SLOTS
from thawwire.internal_calls import write_token
from thawwire.log_settings import LogSettings
from thawwire.trace_flags import as_flags

__all__ = ["LocalBackend", "arena_with_headroom", "fork_server_argv", "replica_argv", "serve_args"]

logger = logging.getLogger(__name__)

_MAX_ARENA_BYTES = 1 << 44  # what `thaw serve --arena-bytes` accepts

REFILL_DELAY_S = 1.0
"""After a claim, how long the pool's refills wait (the replica's first inferences run alone)."""


def arena_with_headroom(nbytes: int) -> int:
    """`nbytes` of model files plus room for the image layout's 4 KiB alignment of every tensor
    (an image of a model with many small tensors is larger than its files: resnet50's by
    ~100 KiB); an arena too small for the image is not used and the restore pays fresh page
    faults instead."""
    return min(nbytes + nbytes // 64 + (4 << 20), _MAX_ARENA_BYTES)


def serve_args(
    config: ActivatorConfig,
    local: LocalConfig,
    bound: BoundAddresses | None = None,
    *,
    handoff_socket: Path | None = None,
    handoff_state: Path | None = None,
    replica_number: int = 0,
    internal_token: Path | None = None,
) -> list[str]:
    """The `thaw serve` arguments (after the command) of one pool process: explicit control
    mode, no model loaded, the frameworks preloaded.

    With the operator's trace file, the replica traces with `thaw up`'s setting to a file of
    its own, `<file>.replica-<replica_number>` (docs/logging-and-tracing.md).

    With `bound` (where the activator listens), ensemble steps go to its front door (with
    `--model-namespacing=true` they run in the ensemble's replica instead); with
    `handoff_socket` too, the replica takes client connections the activator hands over
    (activator.direct.front_door), keeping their state bytes in `handoff_state`; it then also
    enforces the body limit. `internal_token`: the file of the deployment's token, which its
    BLS calls and ensemble steps carry through the front door (thawwire.internal_calls).
    """
    argv = [*_repository_args(config), "--host", "127.0.0.1"]
    argv += ["--port", "0", "--grpc-port", "0", "--model-control-mode", "explicit"]
    # Its surfaces whatever the environment says (AIP_MODE=PREDICTION would turn them off,
    # runtime.process.vertex_ai_flags): `thaw up` reaches it over HTTP and gRPC.
    argv += ["--allow-http=true", "--allow-grpc=true", "--allow-vertex-ai=false"]
    argv += ["--log-level", local.replica_log_level, *_log_args(config.log_settings)]
    if config.backend_directory is not None:  # Python-based backends, as the activator read
        argv += ["--backend-directory", str(config.backend_directory)]
    if config.model_namespacing:
        # Each repository a namespace: an ensemble's steps run in its replica, which resolves
        # them in the ensemble's own namespace first (activator.fleet.repository).
        argv.append("--model-namespacing=true")
    elif bound is not None:
        # An ensemble's steps go to the front door: each composing model has its replicas.
        argv += ["--ensemble-steps-url", bound.front_door_url]
    if handoff_socket is not None and bound is not None:
        argv += ["--handoff-socket", str(handoff_socket), "--front-door", bound.front_door_url]
        if bound.front_door_grpc is not None:
            # BLS streams (exec(decoupled=True)) to other models: every response of a stream.
            argv += ["--front-door-grpc", bound.front_door_grpc]
        argv += ["--handoff-max-age-s", f"{local.direct_max_age_s:g}"]
        if handoff_state is not None:
            argv += ["--handoff-state", str(handoff_state)]
        argv += ["--max-body-bytes", str(max(1024, config.max_body_bytes))]
        # Handed-off clients meet the replica's deadlines: the same as the activator's.
        limits = config.connections
        argv += ["--head-timeout-s", f"{limits.head_timeout_s:g}"]
        argv += ["--idle-timeout-s", f"{limits.idle_timeout_s:g}"]
        argv += ["--body-timeout-s", f"{config.body_timeout_s:g}"]
    if internal_token is not None and bound is not None and config.internal_calls is not None:
        argv += ["--internal-token-file", str(internal_token)]
        argv += ["--max-internal-body-bytes", str(config.internal_calls.max_body_bytes)]
    argv += _image_args(config)
    argv += ["--target", local.target]
    if local.preload_frameworks:
        argv += ["--preload-frameworks", ",".join(local.preload_frameworks)]
    if local.python_spare_stubs:
        argv += ["--python-spare-stubs", str(local.python_spare_stubs)]
        if local.python_spare_stub_imports:
            argv += ["--python-spare-stub-imports", ",".join(local.python_spare_stub_imports)]
    if local.arena_bytes > 0:
        argv += ["--arena-bytes", str(arena_with_headroom(local.arena_bytes))]
    if local.http_header_forward_pattern:
        argv += ["--http-header-forward-pattern", local.http_header_forward_pattern]
    if local.grpc_header_forward_pattern:
        argv += ["--grpc-header-forward-pattern", local.grpc_header_forward_pattern]
    if local.response_cache_bytes:
        argv += ["--cache-config", f"local,size={local.response_cache_bytes}"]
    argv += local.rate_limit_args  # each replica runs its own rate limiter
    argv += local.backend_config_args
    if local.model_config_name:
        argv += ["--model-config-name", local.model_config_name]
    if local.model_load_retries:
        argv += ["--model-load-retry-count", str(local.model_load_retries)]
    argv += local.device_args
    argv += config.metrics_settings.to_args()
    trace = config.trace_defaults
    if trace.file:
        argv += as_flags(trace, f"{Path(trace.file).absolute()}.replica-{replica_number}")
    return argv


def _image_args(config: ActivatorConfig) -> list[str]:
    argv: list[str] = []
    if config.cache_dir is not None:
        argv += ["--cache", str(config.cache_dir)]
        if config.cache_max_bytes is not None:
            argv += ["--cache-max-bytes", str(config.cache_max_bytes)]
    if config.store is not None:
        argv += ["--store", config.store]
    if config.host_cache_bytes > 0 and config.host_cache_dir is not None:
        argv += ["--host-cache", str(config.host_cache_dir)]
        argv += ["--host-cache-bytes", str(config.host_cache_bytes)]
    return argv


def replica_argv(
    config: ActivatorConfig,
    local: LocalConfig,
    bound: BoundAddresses | None = None,
    *,
    handoff_socket: Path | None = None,
    handoff_state: Path | None = None,
) -> list[str]:
    """The whole command line of one spawned pool process (`serve_args` after the command)."""
    args = serve_args(
        config, local, bound, handoff_socket=handoff_socket, handoff_state=handoff_state
    )
    return [*local.serve_command, *args]


def _log_args(settings: LogSettings) -> list[str]:
    """`thaw up`'s log settings at start as tritonserver's flags (its `--log-verbose 1` makes
    its replicas verbose too: their lines reach its log, replica_log). The file is not passed:
    a replica writes standard error, which `thaw up` reads."""
    bools = {"info": settings.info, "warning": settings.warning, "error": settings.error}
    argv = ["--log-verbose", str(settings.verbose_level), "--log-format", settings.format.value]
    for level, on in bools.items():
        argv += [f"--log-{level}", "true" if on else "false"]
    return argv


def _repository_args(config: ActivatorConfig) -> list[str]:
    """REPO, every other repository (`--model-repository`) and whether configs are
    auto-completed, as `thaw up` was given them: a replica reads the models the activator
    read."""
    argv = [str(config.repository)]
    for more in config.more_repositories:
        argv.append(f"--model-repository={more}")
    if not config.auto_complete_config:
        argv.append("--disable-auto-complete-config")
    return argv


def fork_server_argv(config: ActivatorConfig, local: LocalConfig) -> list[str]:
    """The fork server's command line, less its `--fork-server-fd` (fork_server.py adds it):
    it imports what its children preload, and the snapshotter when images are configured.
    It gets the children's `--target` too, and never resolves it: a fork server must not
    create a CUDA context (CUDA does not survive a fork); each child resolves `auto` itself."""
    argv = [*local.fork_server_command, *_repository_args(config)]
    argv += ["--log-level", local.replica_log_level, *_image_args(config)]
    argv += ["--target", local.target]
    if local.preload_frameworks:
        argv += ["--preload-frameworks", ",".join(local.preload_frameworks)]
    return argv


class LocalBackend:
    """Replicas are local processes: claimed from the warm pool (forked or spawned), then loaded.

    `bound`: where this `thaw up` listens, which its replicas reach back (connection handoff,
    ensemble steps, BLS streams); None (tests without a listener): replicas are only proxied to.
    `metrics`: where shared placement counts evictions and loads (None: not counted).
    """

    def __init__(
        self,
        config: ActivatorConfig,
        local: LocalConfig,
        session: aiohttp.ClientSession,
        bound: BoundAddresses | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._config = config
        self._local = local
        self._bound = bound
        self._session = session
        self._procs: dict[str, ReplicaProcess] = {}
        # Models loaded with a repository load's override: their replicas' load parameters.
        self._load_parameters: dict[str, dict[str, str]] = {}
        self._ids = itertools.count(1)
        self._links: dict[str, HandoffLink] = {}
        self._settling: set[asyncio.Task[None]] = set()  # dead replicas' connections
        # Replicas' handoff sockets live in a private directory (0700) removed at close.
        self._run_dir: Path | None = None
        self._token_file: Path | None = None
        if bound is not None:
            self._run_dir = Path(tempfile.mkdtemp(prefix="thaw-up-"))
            if config.internal_calls is not None:  # the replicas' copy of the token, 0600
                self._token_file = self._run_dir / "internal-token"
                write_token(self._token_file, config.internal_calls.token)
        self._socket_ids = itertools.count(1)
        sources: list[ProcessSource] = []
        if local.fork_server:
            sources.append(
                ForkSource(
                    fork_server_argv(config, local), start_timeout_s=local.replica_start_timeout_s
                )
            )
        sources.append(SpawnSource(local.serve_command))
        self._pool = WarmPool(
            PoolPolicy(local.pool),
            sources,
            self._args,
            session,
            start_timeout_s=local.replica_start_timeout_s,
            refill_delay_s=REFILL_DELAY_S,
        )
        self._pool.start()
        self._shared = SharedHosts(
            self._pool,
            local.shared,
            session,
            drain_timeout_s=config.drain_timeout_s,
            metrics=metrics,
        )

    # ---- shared placement (activator.scaler.backend.SharedPlacement) ------------------------

    def share(
        self,
        model: str,
        *,
        image_bytes: int,
        activity: Callable[[], ModelActivity],
        evict: Callable[[], Awaitable[None]],
        resources: frozenset[str] = frozenset(),
    ) -> None:
        self._shared.share(
            model, image_bytes=image_bytes, activity=activity, evict=evict, resources=resources
        )

    def shared_status(self) -> tuple[SharedReplicaStatus, ...]:
        return self._shared.status()

    def shared_counts(self) -> Mapping[str, SharedCounts]:
        return self._shared.counts()

    # ---- load overrides (activator.scaler.backend.LoadParameters) ---------------------------

    def set_load_parameters(self, model: str, parameters: Mapping[str, str] | None) -> None:
        if parameters:
            self._load_parameters[model] = dict(parameters)
        else:
            self._load_parameters.pop(model, None)

    async def _start_shared(self, model: str, deadline: float) -> ReplicaHandle:
        start = time.monotonic()
        replica_id = f"{model}-{next(self._ids)}"
        try:
            parameters = self._load_parameters.get(model)
            proc = await self._shared.start(model, replica_id, deadline, parameters)
        except OSError as exc:
            raise ActivationFailed(f"could not start a replica for '{model}': {exc}") from exc
        logger.info("replica %s model=%s shares %s at %s", replica_id, model, proc.name, proc.url)
        return ReplicaHandle(
            replica_id,
            model,
            proc.url,
            claim_s=0.0,
            restore_s=time.monotonic() - start,
            pid=proc.proc.pid,
            grpc_address=proc.grpc_address,
            host=proc.name,
        )

    # ---- replicas ---------------------------------------------------------------------------

    async def start_replica(self, model: str, *, timeout_s: float) -> ReplicaHandle:
        if self._shared.shares(model):
            return await self._start_shared(model, time.monotonic() + timeout_s)
        start = time.monotonic()
        deadline = start + timeout_s
        proc: ReplicaProcess | None = None
        try:
            proc = await self._pool.claim(model, deadline)
            claimed = time.monotonic()
            parameters = self._load_parameters.get(model)
            await proc.load(model, max(0.01, deadline - claimed), parameters)
        except BaseException as exc:
            if proc is not None:
                await proc.stop(self._config.drain_timeout_s)
            if isinstance(exc, OSError):
                raise ActivationFailed(f"could not start a replica for '{model}': {exc}") from exc
            raise
        finally:
            self._pool.refill_later()  # after the load and the first inferences
        replica_id = f"{model}-{next(self._ids)}"
        proc.name = replica_id
        self._procs[replica_id] = proc
        await self._link(replica_id, model, proc)
        logger.info("replica %s model=%s serving at %s", replica_id, model, proc.url)
        return ReplicaHandle(
            replica_id,
            model,
            proc.url,
            claim_s=claimed - start,
            restore_s=time.monotonic() - claimed,
            pid=proc.proc.pid,
            grpc_address=proc.grpc_address,
            warmup_s=proc.warmup_s,
        )

    async def running_replicas(self, model: str) -> list[ReplicaHandle]:
        """None: local replicas never outlive the `thaw up` that started them (launcher)."""
        return []

    def pool_status(self) -> PoolStatus:
        return self._pool.status()

    def _args(self) -> list[str]:
        number = next(self._socket_ids)
        if self._run_dir is None:
            return serve_args(self._config, self._local, self._bound, replica_number=number)
        socket_path = self._run_dir / f"replica-{number}.sock"
        state_path = _state_path(socket_path)
        with open(state_path, "wb") as file:  # zeros, sparse: pages exist once written
            file.truncate(SLOTS)
        return serve_args(
            self._config,
            self._local,
            self._bound,
            handoff_socket=socket_path,
            handoff_state=state_path,
            replica_number=number,
            internal_token=self._token_file,
        )

    async def _link(self, replica_id: str, model: str, proc: ReplicaProcess) -> None:
        """Connect to the replica's handoff socket; without it the replica is only proxied to."""
        if proc.handoff_socket is None:
            return
        try:
            link = HandoffLink(
                proc.handoff_socket,
                replica_id,
                model=model,
                state_path=_state_path(proc.handoff_socket),
            )
            await link.connect(timeout_s=2.0)
        except (OSError, ValueError) as exc:
            logger.warning("replica %s: no connection handoff (%s)", replica_id, exc)
            return
        self._links[replica_id] = link
        task = asyncio.get_running_loop().create_task(self._settle_when_dead(proc, link))
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    async def _settle_when_dead(self, proc: ReplicaProcess, link: HandoffLink) -> None:
        """Once the replica process is gone, settle the connections it did not end.

        Its handoff socket closing is usually the first sign; the state bytes are final only
        once the process cannot run any more, so a replica that closed the socket but still
        runs (it is being stopped, or broke the protocol and is stopped for it) is waited for.
        """
        await link.lost.wait()
        if proc.alive:
            await proc.proc.wait()
        outcomes = link.replica_died()
        if outcomes:
            logger.warning(
                "replica %s model=%s gone with %d direct connections: %d answered 502, "
                "%d reset mid-response, %d taken back",
                link.replica_id,
                link.model,
                sum(outcomes.values()),
                outcomes[Outcome.BAD_GATEWAY],
                outcomes[Outcome.ABORTED],
                outcomes[Outcome.TAKEN_BACK],
            )
        await link.close()
        with contextlib.suppress(OSError):
            _state_path(link.path).unlink()

    def handoff_link(self, replica_id: str) -> HandoffLink | None:
        """The replica's handoff socket (activator.direct.handoff.HandoffLinks), when connected."""
        return self._links.get(replica_id)

    async def wait_lost(self, replica_id: str) -> str:
        if self._shared.owns(replica_id):
            return await self._shared.wait_lost(replica_id)
        proc = self._procs.get(replica_id)
        if proc is None:
            return "stopped"
        exited = asyncio.ensure_future(proc.proc.wait())
        waits: set[asyncio.Future[Any]] = {exited}
        link = self._links.get(replica_id)
        if link is not None:
            # A replica's handoff socket closing on its own is the earliest sign of its end.
            waits.add(asyncio.ensure_future(link.lost.wait()))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        if proc.proc.returncode is None:
            return "its handoff socket closed"
        tail = proc.stderr_tail(4)
        return f"exit code {proc.proc.returncode}" + (f": {tail}" if tail else "")

    async def stop_replica(self, replica_id: str, *, timeout_s: float) -> None:
        if self._shared.owns(replica_id):
            await self._shared.stop(replica_id)
            return
        link = self._links.pop(replica_id, None)
        if link is not None:
            link.stop_sending()  # its reports still close what it ends while it drains
        proc = self._procs.pop(replica_id, None)
        if proc is not None:
            code = await proc.stop(timeout_s)
            logger.info("replica %s stopped (exit code %s)", replica_id, code)

    async def close(self) -> None:
        procs = list(self._procs)
        await asyncio.gather(
            *(self.stop_replica(r, timeout_s=self._config.drain_timeout_s) for r in procs)
        )
        await self._shared.close()
        await self._pool.close()
        if self._settling:
            await asyncio.wait(self._settling, timeout=LINGER_S + 1.0)
        if self._run_dir is not None:
            with contextlib.suppress(OSError):
                shutil.rmtree(self._run_dir)


def _state_path(socket_path: Path) -> Path:
    """A replica's connection state file, next to its handoff socket."""
    return socket_path.with_suffix(".state")
