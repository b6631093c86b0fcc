"""`LocalConfig`: the settings of the local scaler backend (`thaw up --scaler local`).

What only local `thaw serve` child processes need: the warm pool, what its processes preload,
how they are started and logged, and the connection handoff to them. Built once in cli.py;
what every backend shares (repository, image cache and store, body limit, drain timeout)
stays in `ActivatorConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from activator.pool_policy import PoolSettings
from activator.scaler.launcher import fork_server_command, serve_command

__all__ = ["LocalConfig"]


@dataclass(frozen=True)
class LocalConfig:
    """The local backend's settings; times in seconds."""

    # How many idle processes the pool keeps (at least `pool.min_idle`, more on demand,
    # within `pool.budget_bytes`): activator.pool_policy.
    pool: PoolSettings = field(default_factory=PoolSettings)
    preload_frameworks: tuple[str, ...] = ("onnxruntime", "torch")  # imported by pool processes
    # Pool processes are forked by a fork server that imported the frameworks once
    # (runtime/zygote.py); off: each is a fresh interpreter.
    fork_server: bool = True
    # `thaw serve --target` of every pool process and the fork server: auto (GPUs found
    # without a CUDA context, runtime.device_target), cpu, or cuda.
    target: str = "auto"
    arena_bytes: int = 0  # restore arena pre-faulted per pool process (0: sized at restore)
    replica_start_timeout_s: float = 120.0  # process start -> ready (not counting the load)
    serve_command: tuple[str, ...] = field(default_factory=lambda: serve_command())
    fork_server_command: tuple[str, ...] = field(default_factory=fork_server_command)
    replica_log_level: str = "warning"
    # Where replicas send requests they cannot answer on a handed-off connection (the
    # activator's own listen address; set by cli.py once bound). None: no connection handoff.
    front_door_url: str | None = None
    # The activator's gRPC address (HOST:PORT) for replicas' BLS streams (set by serving.py
    # when the port is known before replicas start). None: BLS streams go over HTTP.
    front_door_grpc: str | None = None
    direct_max_age_s: float = 10.0  # a direct connection's next response after this closes it
