"""`LocalConfig`: the settings of the local scaler backend (`thaw up --scaler local`).

What only local `thaw serve` child processes need: the warm pool, what its processes preload,
how they are started and logged, and the connection handoff to them. Built once in cli.py;
what every backend shares (repository, image cache and store, body limit, drain timeout)
stays in `ActivatorConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from activator.scaler.launcher import fork_server_command, serve_command
from activator.scaler.shared_settings import SharedSettings
from thawserver.rate_limit_flags import ExplicitResource

__all__ = ["LocalConfig", "PoolSettings", "SharedSettings"]


@dataclass(frozen=True)
class PoolSettings:
    """The pool's bounds; sizes in bytes, times in seconds."""

    min_idle: int = 1  # `thaw up --warm-pool`
    max_idle: int = 32
    window_s: float = 60.0  # how long a wake keeps asking for an idle process
    budget_bytes: int = 2 << 30  # `--pool-memory-bytes`: idle processes + the fork server
    default_process_bytes: int = 160 << 20  # one idle process, until one was measured


@dataclass(frozen=True)
class LocalConfig:
    """The local backend's settings; times in seconds."""

    # How many idle processes the pool keeps (at least `pool.min_idle`, more on demand,
    # within `pool.budget_bytes`): activator.scaler.local.pool_policy.
    pool: PoolSettings = field(default_factory=PoolSettings)
    preload_frameworks: tuple[str, ...] = ("onnxruntime", "torch")  # imported by pool processes
    # Python stubs each pool process starts while idle (`thaw serve --python-spare-stubs`).
    python_spare_stubs: int = 1
    python_spare_stub_imports: tuple[str, ...] = ()  # modules those stubs import while waiting
    # Pool processes are forked by a fork server that imported the frameworks once
    # (runtime/process/zygote.py); off: each is a fresh interpreter.
    fork_server: bool = True
    # `thaw serve --target` of every pool process and the fork server: auto (GPUs found
    # without a CUDA context, runtime.devices.target), cpu, or cuda.
    target: str = "auto"
    arena_bytes: int = 0  # restore arena pre-faulted per pool process (0: sized at restore)
    replica_start_timeout_s: float = 120.0  # process start -> ready (not counting the load)
    serve_command: tuple[str, ...] = field(default_factory=lambda: serve_command())
    fork_server_command: tuple[str, ...] = field(default_factory=fork_server_command)
    replica_log_level: str = "info"  # `thaw up --log-level`: a replica logs what thaw up does
    # Where replicas reach the activator (connection handoff, ensemble steps, BLS streams) is
    # not config: binding returns it (activator.config.BoundAddresses, given to the backend).
    direct_max_age_s: float = 10.0  # a direct connection's next response after this closes it
    shared: SharedSettings = field(default_factory=SharedSettings)
    # `thaw up --http-header-forward-pattern` / `--grpc-header-forward-pattern`, given to every
    # replica: the front doors pass headers and metadata on, the replica makes them parameters.
    http_header_forward_pattern: str = ""
    grpc_header_forward_pattern: str = ""
    # `thaw up --cache-config local,size=N`: each replica's own response cache (0: none).
    response_cache_bytes: int = 0
    # `thaw up --rate-limit ... --rate-limit-resource ...`, as every replica's flags.
    rate_limit_args: tuple[str, ...] = ()
    # `--rate-limit=execution_count`: models naming a rate-limiter resource in common share
    # replicas (activator.fleet.sharing), so one replica's limiter counts them all.
    rate_limited: bool = False
    # `--rate-limit-resource`, as parsed: the counts a model added later is judged by.
    rate_limit_resources: tuple[ExplicitResource, ...] = ()
    # `thaw up --backend-config ...` (python's shm and stub settings), as every replica's flags.
    backend_config_args: tuple[str, ...] = ()
    # `--model-config-name` given to every replica (tritonconfig.config_name); "": none
    model_config_name: str = ""
    # `--model-load-retry-count` given to every replica: its loads tried this many more times
    model_load_retries: int = 0
    # tritonserver's device flags given to every replica, as its argv (thawserver.device_flags)
    device_args: tuple[str, ...] = ()
