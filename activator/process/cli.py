"""`thaw up REPO`: the activator with its scaler: local processes (+ warm pool, image cache) or
Kubernetes pods (`--scaler kubernetes`, kube_cli's flags)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import sys
from pathlib import Path
from typing import Any

from activator.config import (
    SETTING_RANGES,
    ActivatorConfig,
    ScaleSettings,
    validated,
)
from activator.errors import ConfigError, ScalerUnavailable
from activator.process.body_limit_cli import add_body_limit_arguments, internal_calls
from activator.process.flag_checks import (
    backend_directory,
    check_range,
    connection_limits,
    extra_port,
    host_cache_bytes,
    load_models,
    refuse_local_only_flags,
    repository_poll_s,
)
from activator.process.kube_cli import add_kubernetes_arguments, kubernetes_config, placement
from activator.process.local_cli import local_config
from activator.process.repository_cli import (
    add_repository_arguments,
    check_startup_models,
    models_loaded_at_start,
    onnx_graph_refusals,
    refuse_remote_on_kubernetes,
    repository_settings,
    start_refusal,
    start_warnings,
    triton_bool,
)
from activator.process.serving import ListenError, LoadAtStartError, loop_factory, serve
from activator.process.shared_cli import (
    add_shared_arguments,
    shared_replica_concurrency,
)
from activator.scaler.backend import ScalerKind
from activator.scaler.kube_config import KubernetesConfig
from activator.scaler.local.host_tier import make_tier_dir, remove_tier_dir
from activator.scaler.local_config import LocalConfig, PoolSettings
from thawserver import lora_flags, max_tokens_flag
from thawserver.backend_config_flags import add_backend_config_argument
from thawserver.cache_flags import add_cache_arguments
from thawserver.fd_limit import bounded_by_fd_limit
from thawserver.flag_names import as_typed
from thawserver.grpc_compression import add_compression_argument
from thawserver.grpc_keepalive import add_keepalive_arguments, keepalive_from
from thawserver.grpc_tls import add_tls_arguments, tls_from_args
from thawserver.limit_flags import add_body_timeout_argument, add_limit_arguments
from thawserver.log_control import LogControl
from thawserver.metrics_config_flags import add_metrics_config_argument, parse_metrics_config
from thawserver.model_config_name_flag import add_model_config_name_argument
from thawserver.rate_limit_flags import add_rate_limit_arguments
from thawserver.repository_flags import localized, names_s3
from thawserver.restricted_protocols import (
    add_restriction_arguments,
    parse_http_restrictions,
    parse_restrictions,
)
from thawserver.s3_repository.errors import RepositorySourceError
from thawserver.s3_repository.localize import LocalizedRepositories
from thawserver.settings_flags import (
    add_log_output_flags,
    add_trace_flags,
    log_settings,
    trace_setting,
)
from thawserver.tool_call_flags import add_tool_call_arguments, replica_environment
from thawwire.model_control import ModelControlMode
from thawwire.openai_api import MAX_TOKENS_LIMIT

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
    "activation_timeout_s": "seconds a request may be held for a wake-up (then 504; the start "
    "goes on)",
    "load_timeout_s": "seconds one replica start (process + model load) may take before it "
    "fails; the repository load call waits this long",
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
    add_repository_arguments(p)
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument(
        "--port", type=int, default=8000, help="listen port (default 8000); 0 picks a free one"
    )
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
            f"--allow-{name}", type=triton_bool, default=True, metavar="BOOL",
            help=f"serve the {name} port (default true)",
        )  # fmt: skip
    add_compression_argument(triton, responses="the gRPC front door's responses (as thaw serve)")
    add_keepalive_arguments(triton)
    add_model_config_name_argument(triton, replicas=True)
    triton.add_argument(
        "--model-load-retry-count", dest="model_load_retries", type=int, default=0,
        metavar="N", help="each replica tries a model version whose load fails N more times, "
        "as tritonserver (default 0)",
    )  # fmt: skip
    triton.add_argument(
        "--id", dest="server_id", default="triton", metavar="ID",
        help="this server's identifier: the `name` of its server metadata (default triton)",
    )  # fmt: skip
    add_tls_arguments(
        triton, where="the gRPC front door",
        note="The replicas behind it are reached in plaintext over loopback",
    )  # fmt: skip
    p.add_argument(
        "--cache",
        type=Path,
        default=None,
        metavar="DIR",
        help="snapshot image cache directory (default ~/.cache/thaw/images)",
    )
    p.add_argument(
        "--store",
        default=None,
        metavar="URI",
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
        metavar="LIST",
        help="frameworks warm-pool processes import before ready, a comma list of onnxruntime, "
        "torch, tensorrt (default onnxruntime,torch; '' for none)",
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
    add_shared_arguments(local)
    p.add_argument(
        "--request-timeout-s",
        type=float,
        default=300.0,
        help="a proxied request with no answer by then gets 504 (default 300)",
    )
    p.add_argument(
        "--drain-timeout-s",
        type=float,
        default=30.0,
        help="scale-down/shutdown wait for in-flight requests (default 30)",
    )
    p.add_argument(
        "--exit-timeout-secs",
        dest="drain_timeout_s",
        type=float,
        metavar="EXIT_TIMEOUT_SECS",
        help="tritonserver's name for --drain-timeout-s (the last one given wins)",
    )
    add_body_limit_arguments(p)  # --max-body-bytes and the platform's own calls' cap
    p.add_argument(
        "--backend-directory", type=Path, metavar="DIR",
        help="Python-based backends, as tritonserver's flag: a config's `backend: NAME` that "
        "Thaw does not have runs DIR/NAME/model.py as a Python model (e.g. Triton's "
        "vllm_backend in DIR/vllm/); given to every replica too. Local scaler only",
    )  # fmt: skip
    _add_connection_arguments(p)
    add_tool_call_arguments(p, {})  # given to each local replica (thawserver.tool_call_flags)
    lora_flags.add_lora_argument(p, {})  # used here, and given to each local replica
    max_tokens_flag.add_default_max_tokens_argument(p, {})  # given to each local replica
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
    p.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="thaw up's log level, and its local replicas' (default info)",
    )
    _add_log_and_trace_arguments(p)
    restricted = p.add_argument_group(
        "restricted APIs (as thaw serve and tritonserver; applied at the front doors, HTTP and "
        "gRPC, before a request is held or forwarded; direct connections are off with an HTTP one)"
    )
    add_restriction_arguments(restricted)
    _add_header_forward_arguments(p)
    add_cache_arguments(
        p.add_argument_group(
            "response cache (as thaw serve and tritonserver; each replica keeps its own, "
            "--scaler local)"
        )
    )
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


def _add_log_and_trace_arguments(p: argparse.ArgumentParser) -> None:
    """tritonserver's logging and trace flags, as on `thaw serve` (thawserver.settings_flags);
    clients change these settings through /v2/logging and /v2/trace/setting, never a file."""
    g = p.add_argument_group("logging and tracing (tritonserver's flags, as on thaw serve)")
    g.add_argument("--log-verbose", type=int, default=0, metavar="N",
                   help="verbose logging level; above 0 logs at debug")  # fmt: skip
    for level in ("info", "warning", "error"):
        g.add_argument(f"--log-{level}", type=triton_bool, default=True, metavar="BOOL",
                       help=f"log {level} messages (default true)")  # fmt: skip
    add_log_output_flags(g)
    add_trace_flags(g)


def _log_and_trace(args: argparse.Namespace) -> dict[str, Any]:
    """The ActivatorConfig fields of the logging and trace flags; ConfigError names a bad one."""
    try:
        verbose = max(args.log_verbose, 1 if args.log_level == "debug" else 0)
        logs = log_settings(
            args, info=args.log_info, warning=args.log_warning, error=args.log_error,
            verbose_level=verbose,
        )  # fmt: skip
        trace = trace_setting(args)
    except ValueError as exc:
        raise ConfigError(_as_typed(str(exc))) from None
    return {"log_settings": logs, "log_floor": args.log_level, "trace_defaults": trace}


def _as_typed(message: str) -> str:
    """`message` naming each setting as its flag is typed (thawserver.flag_names)."""
    subparsers = argparse.ArgumentParser(prog="thaw").add_subparsers()
    register(subparsers)
    (up,) = subparsers.choices.values()
    return as_typed(message, up)


def _add_header_forward_arguments(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group(
        "request headers as parameters, the rate limiter, backend settings (as thaw serve and "
        "tritonserver; given to every replica, --scaler local)"
    )
    for surface, what in (("http", "HTTP headers"), ("grpc", "gRPC metadata")):
        group.add_argument(
            f"--{surface}-header-forward-pattern", default="", metavar="REGEX",
            help=f"{what} whose name matches (case-insensitive, anywhere in the name; a leading "
            "(?-i) makes it case-sensitive) reach the model as string request parameters",
        )  # fmt: skip
    add_rate_limit_arguments(group, replicas=True)
    add_backend_config_argument(group, replicas=True)
    add_metrics_config_argument(group, replicas=True)
    # As on `thaw serve` (runtime.process.triton_flags.IGNORED_FLAGS): Triton's sampling period.
    group.add_argument(
        "--metrics-interval-ms", default=None, metavar="VALUE",
        help="accepted without effect: thaw computes metrics when scraped",
    )  # fmt: skip


def _add_connection_arguments(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("slow and idle clients (every port; 0 turns a limit off)")
    add_limit_arguments(group)
    add_body_timeout_argument(group, also=", never past --request-timeout-s")


def build_config(args: argparse.Namespace) -> ActivatorConfig:
    """Flags -> ActivatorConfig; raises ConfigError with the flag, value and range."""
    given = {
        name: getattr(args, f"scale_{name}")
        for name in SETTING_RANGES
        if getattr(args, f"scale_{name}") is not None
    }
    given["direct_connections"] = args.direct_connections
    kubernetes = args.scaler == ScalerKind.KUBERNETES.value
    repositories = repository_settings(args, kubernetes=kubernetes)
    settings = validated(ScaleSettings(), given)
    check_range("--port", args.port, 0, 65535)
    grpc_port = extra_port("--grpc-port", args.grpc_port, args.allow_grpc, 8001, args.port)
    metrics_port = extra_port(
        "--metrics-port", args.metrics_port, args.allow_metrics, 8002, args.port
    )
    check_range("--warm-pool", args.warm_pool, 0, 64)
    check_range("--model-load-retry-count", args.model_load_retries, 0, 100)
    check_range("--max-body-bytes", args.max_body_bytes, 1, 1 << 40)
    check_range("--request-timeout-s", args.request_timeout_s, 0.1, 86_400)
    check_range("--body-timeout-s", args.body_timeout_s, 0.1, 3600)
    check_range("--max-tool-call-parse-bytes", args.max_tool_call_parse_bytes, 1, 1 << 30)
    check_range("--default-max-tokens", args.default_max_tokens, 1, MAX_TOKENS_LIMIT)
    check_range("--drain-timeout-s", args.drain_timeout_s, 0, 3600)
    check_range("--direct-max-age-s", args.direct_max_age_s, 0, 86_400)
    check_range("--arena-bytes", args.arena_bytes, 0, 1 << 44)
    check_range("--pool-memory-bytes", args.pool_memory_bytes, 0, 1 << 44)
    check_range("--pool-window-s", args.pool_window_s, 0, 86_400)
    if args.cache_max_bytes is not None:
        check_range("--cache-max-bytes", args.cache_max_bytes, 1, 1 << 50)
    if args.gpu_hour_price is not None:
        check_range("--gpu-hour-price", args.gpu_hour_price, 0, 1_000_000)
    try:  # thaw serve's parse and check, in tritonserver's words
        grpc_restrictions = parse_restrictions(args.grpc_restricted_protocol)
        http_restrictions = parse_http_restrictions(args.http_restricted_api)
        grpc_tls = tls_from_args(args) if grpc_port is not None else None
        metrics_settings = parse_metrics_config(args.metrics_config)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    host_bytes = host_cache_bytes(args.host_cache_bytes, kubernetes=kubernetes)
    cache = args.cache or (None if kubernetes else Path(os.path.expanduser("~/.cache/thaw/images")))
    return ActivatorConfig(
        **repositories,
        metrics_settings=metrics_settings,
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
        internal_calls=internal_calls(args, kubernetes=kubernetes),
        lora_separator=args.lora_separator or None,
        request_timeout_s=args.request_timeout_s,
        body_timeout_s=args.body_timeout_s,
        model_control=args.model_control_mode == ModelControlMode.EXPLICIT,
        repository_poll_s=repository_poll_s(args, kubernetes=kubernetes),
        load_models=load_models(args),
        backend_directory=backend_directory(args, kubernetes=kubernetes),
        connections=connection_limits(args),
        drain_timeout_s=args.drain_timeout_s,
        shared_replica_concurrency=shared_replica_concurrency(args),
        scaler=_scaler_config(args),
        grpc_port=grpc_port,
        grpc_response_compression_level=args.grpc_response_compression_level,
        grpc_keepalive=keepalive_from(args),
        server_id=args.server_id,
        model_config_name=args.model_config_name or "",
        grpc_tls=grpc_tls,
        metrics_port=metrics_port,
        gpu_hour_price=args.gpu_hour_price,
        http_restrictions=http_restrictions,
        grpc_restrictions=grpc_restrictions,
        **_log_and_trace(args),
    )


def _scaler_config(args: argparse.Namespace) -> LocalConfig | KubernetesConfig:
    """The chosen scaler backend's config, from its flags (`--scaler`)."""
    if args.scaler == ScalerKind.KUBERNETES.value:
        refuse_local_only_flags(args)
        return kubernetes_config(args, os.environ)
    return local_config(args)


def run(args: argparse.Namespace) -> int:
    # Before grpc is imported: replicas are started by fork+exec only, so grpc's fork handlers
    # (and their "skipping fork() handlers" log line per replica) are not needed.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )  # until the config is read (then LogControl below)
    if names_s3(args):
        try:
            refuse_remote_on_kubernetes(args)
            build_config(args)  # every flag checked before a repository is downloaded
        except ConfigError as exc:
            print(f"thaw up: error: {exc.message}", file=sys.stderr)
            return 2
    try:
        # S3 repositories (`s3://...`) are copied once, here: the activator and every replica
        # read the one copy (the same files at zero and warm), synced before each load's and
        # poll's re-read and removed at exit (thawserver.s3_repository).
        args, localized_repositories = localized(args, os.environ)
    except RepositorySourceError as exc:
        print(f"thaw up: error: {exc}", file=sys.stderr)
        return 1
    try:
        return _run(args, localized_repositories)
    finally:
        localized_repositories.close()


def _run(args: argparse.Namespace, repositories: LocalizedRepositories) -> int:
    from activator.fleet.repository import Repository

    for warning in start_warnings(args):
        print(warning, file=sys.stderr)  # as tritonserver, before its log starts
    try:
        config = build_config(args)
        # Once the flags are accepted: the replicas' --tool-call-parser, ... (a refused start
        # leaves this process's environment as it was).
        os.environ.update(replica_environment(args))
        os.environ.update(lora_flags.replica_environment(args))
        os.environ.update(max_tokens_flag.replica_environment(args))
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
        repository = Repository.scan(
            config.repositories, config.defaults, backend_directory=config.backend_directory,
            auto_complete=config.auto_complete_config, missing_ok=config.exit_on_error is False,
            namespacing=config.model_namespacing, config_name=config.model_config_name,
        )  # fmt: skip
        if repository.start_error is not None:  # --exit-on-error=false: answer, not live
            print(f"thaw up: error: {repository.start_error}", file=sys.stderr)
        repository = _with_model_settings(repository, args.model_settings)
    except ConfigError as exc:
        print(f"thaw up: error: {exc.message}", file=sys.stderr)
        return 2
    try:  # `--load-model`: refused as thaw serve refuses it, exit 1
        check_startup_models(
            (*config.load_models, *config.loaded_at_zero), explicit=config.model_control,
            servable=repository.names(),
            unavailable={*repository.unavailable, *repository.ambiguous},
        )  # fmt: skip
    except ConfigError as exc:
        print(f"thaw up: error: {exc.message}", file=sys.stderr)
        return 1
    unavailable = dict(repository.unavailable)
    if config.exit_on_error:  # every model the start loads is checked, as tritonserver's load
        loaded = models_loaded_at_start(
            config.load_models, explicit=config.model_control, servable=repository.names()
        )
        unavailable.update(onnx_graph_refusals(repository, loaded))
    refusal = start_refusal(
        unavailable, exit_on_error=config.exit_on_error,
        explicit=config.model_control, load_models=config.load_models,
    )  # fmt: skip
    if refusal is not None:  # as `thaw serve --exit-on-error=true` refuses it, exit 1
        print(f"thaw up: error: {refusal}", file=sys.stderr)
        return 1
    log = LogControl(config.log_settings, quietest=logging.getLevelName(config.log_floor.upper()))
    try:
        log.install()
    except OSError as exc:
        print(f"thaw up: error: cannot open --log-file: {exc}", file=sys.stderr)
        return 2
    if isinstance(config.scaler, KubernetesConfig):
        settings = {m: repository.get(m).settings for m in repository.names()}
        classes = {m: s.placement_class for m, s in settings.items()}
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
        where = ", ".join(str(r) for r in config.repositories)
        print(f"thaw up: warning: no servable model in {where}", file=sys.stderr)
    if config.cache_dir is not None:
        config.cache_dir.mkdir(parents=True, exist_ok=True)
    if config.host_cache_bytes > 0:
        config = dataclasses.replace(config, host_cache_dir=make_tier_dir())
    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            sync = repositories if repositories.any_remote else None
            runner.run(serve(config, repository, log, sync))
    except (ListenError, LoadAtStartError) as exc:
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
    from activator.fleet.model_settings import apply_model_settings, read_model_settings

    repository, unknown = apply_model_settings(repository, read_model_settings(path), source=path)
    for name in unknown:
        print(
            f"thaw up: warning: {path} names model '{name}', not in the repository", file=sys.stderr
        )
    return repository
