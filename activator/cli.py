"""`thaw up REPO`: the activator with its scaler: local processes (+ warm pool, image cache) or
Kubernetes pods (`--scaler kubernetes`, kube_cli's flags)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import math
import os
import sys
from pathlib import Path
from typing import Any

from activator.config import SETTING_RANGES, ActivatorConfig, ScaleSettings, validated
from activator.errors import ConfigError, ScalerUnavailable
from activator.host_tier import default_budget_bytes, make_tier_dir, remove_tier_dir
from activator.kube_cli import add_kubernetes_arguments, kubernetes_config, placement
from activator.pool_policy import PoolSettings
from activator.scaler.backend import ScalerKind
from activator.scaler.kube_config import KubernetesConfig
from activator.scaler.local_config import LocalConfig
from activator.serving import ListenError, loop_factory, serve
from thawwire.connection_limits import LIMIT_RANGES, ConnectionLimits, out_of_range
from thawwire.fd_limit import bounded_by_fd_limit
from thawwire.limit_flags import add_limit_arguments, limits_from_args
from thawwire.restricted_protocols import (
    add_restriction_arguments,
    parse_http_restrictions,
    parse_restrictions,
)

__all__ = ["register", "run"]

logger = logging.getLogger(__name__)

_DESCRIPTION = """\
Run the whole platform on this machine. Every model of the Triton model repository REPO gets
the KServe v2 endpoints at http://HOST:PORT/v2/models/<name>/... and starts at zero replicas.
Metadata, config and readiness are answered without waking a model; the first inference
request holds while a replica is claimed from the warm pool and the model restored into it,
then replicas follow load (Knative-style stable/panic windows) and go back to zero after the
idle grace period. Each scale setting below is the default for every model; a model overrides
it in its config.pbtxt, e.g.

  parameters { key: "thaw.max_replicas" value { string_value: "2" } }

Prometheus metrics are on /metrics; the status page (models, cold starts, plots, the cost
of scale to zero against always-on replicas) on /ui/; `thaw status` prints a table of the models.
SIGTERM/SIGINT stop accepting, drain in-flight requests and stop every replica.
"""

_SETTING_HELP = {
    "min_replicas": "replicas kept even when idle",
    "max_replicas": "upper bound of replicas per model",
    "target_concurrency": "in-flight requests per replica the autoscaler aims for",
    "scale_to_zero_grace_s": "seconds without requests before the last replica goes",
    "stable_window_s": "seconds of history behind normal scaling decisions",
    "panic_window_s": "seconds of history that detect a burst",
    "panic_threshold": "burst = panic-window demand >= this x ready replicas",
    "scale_down_delay_s": "keep the highest replica count of the last N seconds",
    "activation_timeout_s": "seconds a request may be held; a wake-up slower than this fails",
    "max_held_requests": "held requests per model before 503 + Retry-After",
    "max_held_bytes": "sum of held request bodies (declared) per model before 503",
    "container_concurrency": "in-flight requests per replica (0 = unlimited)",
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "up",
        help="run the platform (activator + warm pool + cache) on this machine",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("repository", metavar="REPO", type=Path, help="Triton model repository")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="listen port; 0 picks a free one")
    triton = p.add_argument_group("Triton's other ports")
    triton.add_argument(
        "--grpc-port", type=int, default=None, metavar="PORT",
        help="KServe v2 gRPC port (default 8001; with --port 0 a free one); models at zero "
        "are held and woken as over HTTP",
    )  # fmt: skip
    triton.add_argument(
        "--metrics-port", type=int, default=None, metavar="PORT",
        help="Prometheus /metrics port, as Triton's (default 8002; with --port 0 a free one); "
        "/metrics is on --port too",
    )  # fmt: skip
    for name in ("grpc", "metrics"):
        triton.add_argument(
            f"--allow-{name}", type=_triton_bool, default=True, metavar="BOOL",
            help=f"serve the {name} port (default true)",
        )  # fmt: skip
    p.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="snapshot image cache directory (default ~/.cache/thaw/images)",
    )
    p.add_argument(
        "--store",
        default=None,
        help="image store URI (e.g. s3://bucket/prefix or a directory); with it, the local "
        "scaler pulls each model's image into the cache at start-up, without it images are "
        "built there",
    )
    p.add_argument("--no-image-build", action="store_true", help="do not build images at start")
    p.add_argument(
        "--cache-max-bytes",
        type=int,
        default=None,
        metavar="N",
        help="byte budget of the image cache: least recently used chunks are evicted to fit "
        "(default: unbounded)",
    )
    p.add_argument(
        "--host-cache-bytes",
        type=int,
        default=None,
        metavar="N",
        help="keep images of models scaled to zero in shared memory up to N bytes, so their "
        "next wake maps the image instead of reading it (0: off; default 1/8 of this "
        "machine's memory; local scaler only: off with --scaler kubernetes)",
    )
    p.add_argument(
        "--scaler",
        choices=[kind.value for kind in ScalerKind],
        default=ScalerKind.LOCAL.value,
        help="where replicas run: local = `thaw serve` processes on this machine (default); "
        "kubernetes = warm-pool pods claimed on demand (needs the `kubernetes` extra)",
    )
    p.add_argument(
        "--model-settings",
        type=Path,
        default=None,
        metavar="FILE",
        help='per-model `thaw.*` overrides, JSON {"models": {name: {"thaw.<setting>": value}}} '
        "(the Helm chart's models ConfigMap)",
    )
    local = p.add_argument_group("local scaler (--scaler local)")
    local.add_argument(
        "--warm-pool",
        type=int,
        default=1,
        metavar="N",
        help="idle runtime processes kept ready at least (default 1); the pool keeps one per "
        "model woken within --pool-window-s, within --pool-memory-bytes",
    )
    local.add_argument(
        "--pool-memory-bytes",
        type=int,
        default=PoolSettings().budget_bytes,
        metavar="N",
        help="memory (PSS) the idle pool processes and the fork server may use together "
        f"(default {PoolSettings().budget_bytes >> 20} MiB; 0: no idle processes)",
    )
    local.add_argument(
        "--pool-window-s",
        type=float,
        default=PoolSettings().window_s,
        metavar="S",
        help="a model's wake keeps an idle process for it this long (default %(default)g)",
    )
    local.add_argument(
        "--fork-server",
        choices=["on", "off"],
        default="on",
        help="fork pool processes from one process that imported the frameworks (default "
        "on); off: start each as a fresh interpreter",
    )
    local.add_argument(
        "--preload-frameworks",
        default="onnxruntime,torch",
        help="frameworks warm-pool processes import before ready ('' for none)",
    )
    local.add_argument(
        "--target",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="where pool processes run KIND_AUTO models and which images they look up: auto "
        "(default: each pool process finds this machine's GPUs without creating a CUDA "
        "context, as Triton resolves KIND_AUTO, and becomes CUDA-ready when there are any), "
        "cpu, or cuda",
    )
    local.add_argument(
        "--arena-bytes",
        type=int,
        default=0,
        help="restore arena pre-faulted in every idle pool process (default 0: a restore "
        "allocates an arena the size of the model that claimed the process)",
    )
    p.add_argument(
        "--request-timeout-s",
        type=float,
        default=300.0,
        help="a proxied request with no answer by then gets 504",
    )
    p.add_argument(
        "--drain-timeout-s",
        type=float,
        default=30.0,
        help="scale-down/shutdown wait for in-flight requests",
    )
    p.add_argument("--max-body-bytes", type=int, default=64 * 1024 * 1024)
    p.add_argument(
        "--model-control-mode", choices=["none", "explicit"], default="none",
        help="explicit: serve the repository load/unload API (load warms a model now, unload "
        "scales it to zero now); none: refuse it as Triton does (default none)",
    )  # fmt: skip
    _add_connection_arguments(p)
    p.add_argument(
        "--direct-connections",
        choices=["on", "off"],
        default="on",
        help="hand a warm model's new client connections straight to a replica, taking the "
        "activator out of their data path (default on; per model: thaw.direct_connections "
        '"true"/"false"). Direct connections skip the activator\'s queue, breaker and '
        "timeouts, and a replica that dies resets them instead of answering 502",
    )
    local.add_argument(
        "--direct-max-age-s",
        type=float,
        default=10.0,
        help="a direct connection older than this is closed after its next response, so "
        "clients reconnect through the activator and load rebalances (default 10)",
    )
    p.add_argument(
        "--gpu-hour-price",
        type=float,
        default=None,
        metavar="PRICE",
        help="price of one GPU-hour: the status page, `thaw status --cost` and "
        "/thaw/status then show GPU-seconds used and saved as money too",
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    restricted = p.add_argument_group(
        "restricted APIs (as thaw serve and tritonserver; applied at the front doors, HTTP and "
        "gRPC, before a request is held or forwarded; direct connections are off with an HTTP one)"
    )
    add_restriction_arguments(restricted)
    add_kubernetes_arguments(p)
    scale = p.add_argument_group("scale settings (defaults for every model; thaw.<name> overrides)")
    defaults = ScaleSettings()
    for name, (low, high) in SETTING_RANGES.items():
        default = getattr(defaults, name)
        scale.add_argument(
            f"--{name.replace('_', '-')}",
            dest=f"scale_{name}",
            default=None,
            metavar="N",
            help=f"{_SETTING_HELP[name]} (default {default}, range [{low:g}, {high:g}])",
        )
    p.set_defaults(func=run)


def _add_connection_arguments(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("slow and idle clients (every port; 0 turns a limit off)")
    add_limit_arguments(group, "s")
    group.add_argument(
        "--body-timeout-s", type=float, default=60.0, metavar="S",
        help="a request body must have arrived this long after its head, else 408 "
        "(default %(default)g)",
    )  # fmt: skip


def _connection_limits(args: argparse.Namespace) -> ConnectionLimits:
    limits = limits_from_args(args, "s")
    problem = out_of_range(limits, {name: "--" + name.replace("_", "-") for name in LIMIT_RANGES})
    if problem is not None:
        raise ConfigError(problem)
    return limits


def build_config(args: argparse.Namespace) -> ActivatorConfig:
    """Flags -> ActivatorConfig; raises ConfigError with the flag, value and range."""
    given = {
        name: getattr(args, f"scale_{name}")
        for name in SETTING_RANGES
        if getattr(args, f"scale_{name}") is not None
    }
    given["direct_connections"] = args.direct_connections
    settings = validated(ScaleSettings(), given)
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"`--port` = {args.port}, must be in [0, 65535]")
    grpc_port = _extra_port("--grpc-port", args.grpc_port, args.allow_grpc, 8001, args.port)
    metrics_port = _extra_port(
        "--metrics-port", args.metrics_port, args.allow_metrics, 8002, args.port
    )
    _check_range("--warm-pool", args.warm_pool, 0, 64)
    _check_range("--max-body-bytes", args.max_body_bytes, 1, 1 << 40)
    _check_range("--request-timeout-s", args.request_timeout_s, 0.1, 86_400)
    _check_range("--body-timeout-s", args.body_timeout_s, 0.1, 3600)
    _check_range("--drain-timeout-s", args.drain_timeout_s, 0, 3600)
    _check_range("--direct-max-age-s", args.direct_max_age_s, 0, 86_400)
    _check_range("--arena-bytes", args.arena_bytes, 0, 1 << 44)
    _check_range("--pool-memory-bytes", args.pool_memory_bytes, 0, 1 << 44)
    _check_range("--pool-window-s", args.pool_window_s, 0, 86_400)
    if args.cache_max_bytes is not None:
        _check_range("--cache-max-bytes", args.cache_max_bytes, 1, 1 << 50)
    if args.gpu_hour_price is not None:
        _check_range("--gpu-hour-price", args.gpu_hour_price, 0, 1_000_000)
    try:  # thaw serve's check, in tritonserver's words
        parse_restrictions(args.grpc_restricted_protocol)
        parse_http_restrictions(args.http_restricted_api)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    kubernetes = args.scaler == ScalerKind.KUBERNETES.value
    host_bytes = _host_cache_bytes(args.host_cache_bytes, kubernetes=kubernetes)
    cache = args.cache or (None if kubernetes else Path(os.path.expanduser("~/.cache/thaw/images")))
    return ActivatorConfig(
        repository=args.repository,
        host=args.host,
        port=args.port,
        cache_dir=cache,
        cache_max_bytes=args.cache_max_bytes,
        host_cache_bytes=host_bytes,
        store=args.store,
        # On a cluster images are built into the store by an image-builder job, not here.
        build_images=not args.no_image_build and not kubernetes,
        defaults=settings,
        max_body_bytes=args.max_body_bytes,
        request_timeout_s=args.request_timeout_s,
        body_timeout_s=args.body_timeout_s,
        model_control=args.model_control_mode == "explicit",
        connections=_connection_limits(args),
        drain_timeout_s=args.drain_timeout_s,
        scaler=_scaler_config(args),
        grpc_port=grpc_port,
        metrics_port=metrics_port,
        gpu_hour_price=args.gpu_hour_price,
        http_restricted_apis=tuple(args.http_restricted_api),
        grpc_restricted_protocols=tuple(args.grpc_restricted_protocol),
    )


def _host_cache_bytes(given: int | None, *, kubernetes: bool) -> int:
    """The host-memory tier's budget. Off on Kubernetes: the tier is a tmpfs directory of this
    machine that local replicas map, and pods run on other nodes (their node cache is theirs)."""
    if kubernetes:
        if given:
            raise ConfigError(
                f"`--host-cache-bytes` = {given}, must be 0 with --scaler kubernetes "
                "(the host-memory tier is local replicas' shared memory)"
            )
        return 0
    budget = default_budget_bytes() if given is None else given
    _check_range("--host-cache-bytes", budget, 0, 1 << 44)
    return budget


def _extra_port(flag: str, given: int | None, allowed: bool, default: int, http: int) -> int | None:
    """A Triton port of `thaw up`: None when not allowed; with `--port 0`, a free one unless
    given (processes side by side never collide)."""
    if not allowed:
        return None
    port = given if given is not None else (0 if http == 0 else default)
    if not 0 <= port <= 65535:
        raise ConfigError(f"`{flag}` = {port}, must be in [0, 65535]")
    return port


def _triton_bool(text: str) -> bool:
    """A tritonserver boolean flag value."""
    lowered = text.strip().lower()
    if lowered in ("true", "1", "on", "yes"):
        return True
    if lowered in ("false", "0", "off", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean (true or false)")


def _scaler_config(args: argparse.Namespace) -> LocalConfig | KubernetesConfig:
    """The chosen scaler backend's config, from its flags (`--scaler`)."""
    if args.scaler == ScalerKind.KUBERNETES.value:
        return kubernetes_config(args, os.environ)
    frameworks = tuple(f for f in args.preload_frameworks.split(",") if f.strip())
    pool = PoolSettings(
        min_idle=args.warm_pool,
        window_s=args.pool_window_s,
        budget_bytes=args.pool_memory_bytes,
    )
    return LocalConfig(
        pool=pool,
        preload_frameworks=frameworks,
        fork_server=args.fork_server == "on",
        target=args.target,
        arena_bytes=args.arena_bytes,
        direct_max_age_s=args.direct_max_age_s,
    )


def _check_range(flag: str, value: float, low: float, high: float) -> None:
    if not (math.isfinite(value) and low <= value <= high):
        raise ConfigError(f"`{flag}` = {value:g}, must be in [{low:g}, {high:g}]")


def run(args: argparse.Namespace) -> int:
    # Before grpc is imported: replicas are started by fork+exec only, so grpc's fork handlers
    # (and their "skipping fork() handlers" log line per replica) are not needed.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from activator.repository import Repository

    try:
        config = build_config(args)
        config = dataclasses.replace(
            config,
            # Each connection the activator serves may hold a second descriptor (its request's
            # upstream connection, or the copy of a handed-off one); the metrics port, which
            # holds few, is not counted against it.
            connections=bounded_by_fd_limit(
                config.connections,
                explicit=args.max_connections is not None,
                per_connection=2,
            ),
        )
        repository = Repository.scan(config.repository, config.defaults)
        repository = _with_model_settings(repository, args.model_settings)
    except ConfigError as exc:
        print(f"thaw up: error: {exc.message}", file=sys.stderr)
        return 2
    if isinstance(config.scaler, KubernetesConfig):
        classes = {m: repository.get(m).settings.placement_class for m in repository.names()}
        scaler, refused = placement(config.scaler, classes)
        if refused:  # as every invalid `thaw.*` setting: the operator's mistake, refused
            for reason in refused.values():
                print(f"thaw up: error: {reason}", file=sys.stderr)
            return 2
        models = tuple(repository.names())
        config = dataclasses.replace(config, scaler=dataclasses.replace(scaler, models=models))
    for name, reason in sorted(repository.unavailable.items()):
        print(f"thaw up: warning: model '{name}' is unavailable: {reason}", file=sys.stderr)
    if not repository.names():
        print(f"thaw up: warning: no servable model in {config.repository}", file=sys.stderr)
    if config.cache_dir is not None:
        config.cache_dir.mkdir(parents=True, exist_ok=True)
    if config.host_cache_bytes > 0:
        config = dataclasses.replace(config, host_cache_dir=make_tier_dir())
    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            runner.run(serve(config, repository))
    except ListenError as exc:
        print(f"thaw up: error: {exc}", file=sys.stderr)
        return 1
    except ScalerUnavailable as exc:
        print(f"thaw up: error: {exc.message}", file=sys.stderr)
        return 1
    finally:
        remove_tier_dir(config.host_cache_dir)
    return 0


def _with_model_settings(repository: Any, path: Path | None) -> Any:
    """The repository with `--model-settings` applied (warnings for models it lacks)."""
    if path is None:
        return repository
    from activator.model_settings import apply_model_settings, read_model_settings

    repository, unknown = apply_model_settings(repository, read_model_settings(path), source=path)
    for name in unknown:
        print(
            f"thaw up: warning: {path} names model '{name}', not in the repository", file=sys.stderr
        )
    return repository
