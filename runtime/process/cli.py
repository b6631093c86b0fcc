"""`thaw serve REPO`: flags -> ServeConfig -> ModelManager + v2 app -> a serving process."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from runtime.config import (
    ConfigError,
    ModelControlMode,
    ServeConfig,
    parse_cuda_pool,
    parse_gpu_limit,
)
from runtime.devices.target import DeviceTarget, local_target
from runtime.process.sagemaker_flags import apply_sagemaker_environment, sagemaker_settings
from runtime.process.serve_flags import DESCRIPTION, add_serve_arguments
from runtime.process.startup_models import startup_models_refusal
from runtime.process.triton_flags import (
    backend_settings,
    log_ignored,
)
from runtime.process.vertex_ai_flags import apply_vertex_ai_environment, vertex_ai_settings
from runtime.scheduling.rate_limit import parse_mode, parse_resource
from thawserver.cache_flags import cache_bytes
from thawserver.fd_limit import bounded_by_fd_limit
from thawserver.flag_names import as_typed
from thawserver.grpc_keepalive import keepalive_from
from thawserver.grpc_tls import tls_from_args
from thawserver.limit_flags import limits_from_args
from thawserver.log_control import LogControl
from thawserver.metrics_config_flags import metrics_settings as metrics_flags
from thawserver.repository_flags import (
    localized,
    model_repositories,
    names_s3,
    strict_model_config_warnings,
)
from thawserver.reuse_port_flags import check_reuse_port
from thawserver.s3_repository.errors import RepositorySourceError
from thawserver.s3_repository.localize import LocalizedRepositories
from thawserver.settings_flags import log_settings, trace_flag_warnings, trace_setting
from thawwire.internal_calls import InternalCalls, read_token
from thawwire.runtime_parameters import (
    SPARE_IMPORTS_AUTO,
    spare_imports_auto,
    spare_stub_imports,
)

if TYPE_CHECKING:
    from runtime.models.repository_sync import RepositorySync

__all__ = ["build_config", "main", "register", "run"]

logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `serve` to the `thaw` command line (its flags: runtime.process.serve_flags)."""
    p = subparsers.add_parser(
        "serve",
        help="serve model repositories (KServe v2 / Triton HTTP and gRPC)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        # A flag defined twice keeps its last definition: the catch of tritonserver flags Thaw
        # lacks (triton_flags.add_unsupported_flags) never shadows one defined after it.
        conflict_handler="resolve",
    )
    add_serve_arguments(p)
    p.set_defaults(func=run)


def build_config(args: argparse.Namespace) -> ServeConfig:
    """The one ServeConfig of this process; ConfigError names a bad flag."""
    frameworks = tuple(f.strip() for f in args.preload_frameworks.split(",") if f.strip())
    try:
        repositories = model_repositories(args.repository, args.model_repositories)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    try:
        backend_config = backend_settings(args.backend_config)
        rate_limit = parse_mode(args.rate_limit)
        metrics_settings = metrics_flags(args)
        resources = tuple(parse_resource(text) for text in args.rate_limit_resource)
        trace_defaults = trace_setting(args)
        logs = log_settings(
            args, info=args.log_info, warning=args.log_warning, error=args.log_error,
            verbose_level=max(args.log_verbose, 1 if args.log_level.lower() == "debug" else 0),
        )  # fmt: skip
        grpc_tls = tls_from_args(args) if _given(args.allow_grpc) else None
        check_reuse_port(args)
        spares_auto = args.python_spare_stubs.strip() == SPARE_IMPORTS_AUTO
        spares = 0 if spares_auto else _spare_count(args.python_spare_stubs)
        auto_imports = spare_imports_auto(args.python_spare_stub_imports)
        spare_imports = (
            ()
            if auto_imports
            else spare_stub_imports("--python-spare-stub-imports", args.python_spare_stub_imports)
        )
        internal_calls = (
            InternalCalls(read_token(args.internal_token_file), args.max_internal_body_bytes)
            if args.internal_token_file is not None
            else None
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return ServeConfig(
        repository=repositories[0],
        more_repositories=tuple(repositories[1:]),
        **_surfaces(args),
        grpc_tls=grpc_tls,
        model_namespacing=args.model_namespacing,
        model_config_name=args.model_config_name or "",
        strict_readiness=args.strict_readiness,
        exit_on_error=args.exit_on_error,
        auto_complete_config=not (args.disable_auto_complete_config or args.strict_model_config),
        model_load_threads=args.model_load_thread_count,
        model_load_retries=args.model_load_retries,
        metrics_settings=metrics_settings,
        rate_limit=rate_limit.value,
        rate_limit_resources=tuple((r.name, r.count, r.device) for r in resources),
        backend_config=backend_config,
        backend_directory=args.backend_directory,
        http_header_forward_pattern=args.http_header_forward_pattern,
        grpc_header_forward_pattern=args.grpc_header_forward_pattern,
        grpc_restricted_protocols=tuple(args.grpc_restricted_protocol),
        http_restricted_apis=tuple(args.http_restricted_api),
        tool_call_parser=args.tool_call_parser,
        max_tool_call_parse_bytes=args.max_tool_call_parse_bytes,
        lora_separator=args.lora_separator or None,
        default_max_tokens=args.default_max_tokens,
        host=args.http_address if args.http_address is not None else args.host,
        port=args.port,
        model_control_mode=ModelControlMode(args.model_control_mode),
        load_models=tuple(args.load_model),
        repository_poll_secs=args.repository_poll_secs,
        max_body_bytes=args.max_body_bytes,
        max_json_depth=args.max_json_depth,
        store=args.store,
        cache=args.cache,
        target=args.target,
        preload_frameworks=frameworks,
        python_spare_stubs=spares,
        python_spare_stubs_auto=spares_auto,
        python_spare_stub_imports=spare_imports,
        python_spare_stub_imports_auto=auto_imports,
        arena_bytes=args.arena_bytes,
        cache_max_bytes=args.cache_max_bytes,
        host_cache_bytes=args.host_cache_bytes,
        host_cache=args.host_cache,
        fork_server_fd=args.fork_server_fd,
        log_level=_log_level(args),
        log_settings=logs,
        log_floor=args.log_level.lower(),
        trace_defaults=trace_defaults,
        exit_timeout_s=args.exit_timeout_secs,
        event_loop=args.event_loop,
        body_timeout_s=args.body_timeout_s,
        connections=limits_from_args(args),
        inline_exec_max_us=args.inline_exec_max_us,
        handoff_socket=args.handoff_socket,
        front_door=args.front_door,
        front_door_grpc=args.front_door_grpc,
        internal_calls=internal_calls,
        handoff_max_age_s=args.handoff_max_age_s,
        handoff_state=args.handoff_state,
        response_cache_bytes=_cache_bytes(args.cache_config, args.response_cache_byte_size),
        ensemble_steps_url=args.ensemble_steps_url,
        cuda_memory_pools=tuple(parse_cuda_pool(t) for t in args.cuda_memory_pool_byte_size),
        model_load_gpu_limits=tuple(
            dict(parse_gpu_limit(t) for t in args.model_load_gpu_limit).items()
        ),
        pinned_memory_pool_bytes=args.pinned_memory_pool_byte_size,
        vram_headroom_bytes=args.vram_headroom_bytes,
        min_compute_capability=args.min_supported_compute_capability,
    )


def wants_cuda_warmup(config: ServeConfig, target: DeviceTarget) -> bool:
    """A CUDA target (`auto` that found a GPU included) or a GPU flag: warm up CUDA before
    reporting ready."""
    return target.cuda or bool(config.cuda_memory_pools) or config.pinned_memory_pool_bytes > 0


def _surfaces(args: argparse.Namespace) -> dict[str, Any]:
    """The listeners' settings. With `--port 0` (tests, `thaw up`'s replicas) the gRPC and
    metrics ports not given are free ones too, so that processes side by side never collide."""
    free = args.port == 0
    # `--host` is every listener's default address; tritonserver's `--http-address` is HTTP's
    # alone (so `--http-address -47 --allow-http 0` starts, as tritonserver does: qa/L0_socket).
    others = args.host if args.http_address is not None else None
    return {
        "allow_http": _given(args.allow_http),
        "allow_grpc": _given(args.allow_grpc),
        **vertex_ai_settings(args),
        **sagemaker_settings(args),
        "reuse_http_port": args.reuse_http_port,
        "http_front": args.front,
        "reuse_grpc_port": args.reuse_grpc_port,
        "grpc_host": args.grpc_address if args.grpc_address is not None else others,
        "grpc_port": args.grpc_port if args.grpc_port is not None else (0 if free else 8001),
        "grpc_max_message_bytes": args.grpc_max_message_bytes,
        "grpc_response_compression_level": args.grpc_response_compression_level,
        "grpc_keepalive": keepalive_from(args),
        "server_id": args.server_id,
        "allow_metrics": args.allow_metrics,
        "metrics_host": args.metrics_address if args.metrics_address is not None else others,
        "metrics_port": args.metrics_port
        if args.metrics_port is not None
        else (0 if free else 8002),
    }


def _spare_count(text: str) -> int:
    """`--python-spare-stubs N` (the range is ServeConfig's check); ValueError names the flag."""
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(
            f"--python-spare-stubs: {text[:40]!r} is not a number of stubs (0-8) or 'auto'"
        ) from None


def _given(allow: bool | None) -> bool:
    """`--allow-http` / `--allow-grpc`: None (not given, no Vertex AI environment) is true."""
    return allow is not False


def _log_level(args: argparse.Namespace) -> str:
    """`--log-level`, or what tritonserver's `--log-verbose`/`--log-info|warning|error` ask."""
    if args.log_verbose > 0:
        return "debug"
    level = args.log_level.lower()
    if level not in _LEVELS:
        return level  # ServeConfig refuses it, naming the setting
    for flag, quieter in (("log_info", "warning"), ("log_warning", "error"),
                          ("log_error", "critical")):  # fmt: skip
        if not getattr(args, flag) and _LEVELS.index(level) < _LEVELS.index(quieter):
            level = quieter
    return level


_LEVELS = ("debug", "info", "warning", "error", "critical")


def _cache_bytes(specs: list[str], legacy_bytes: int | None) -> int:
    try:
        return cache_bytes(specs, legacy_bytes)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    """Entry point of `thaw serve`; returns the process exit status."""
    for warning in strict_model_config_warnings(
        args.strict_model_config, disable_auto_complete=args.disable_auto_complete_config
    ) + trace_flag_warnings(args):
        print(warning, file=sys.stderr)  # as tritonserver, before its log starts
    try:
        apply_vertex_ai_environment(args, os.environ)  # AIP_MODE, AIP_STORAGE_URI, ...
        apply_sagemaker_environment(args, os.environ)  # SAGEMAKER_TRITON_DEFAULT_MODEL_NAME
    except ValueError as exc:
        print(f"thaw serve: error: {exc}", file=sys.stderr)
        return 2
    if names_s3(args):
        try:
            build_config(args)  # every flag checked before a repository is downloaded
        except ConfigError as exc:
            print(f"thaw serve: error: {_as_typed(str(exc))}", file=sys.stderr)
            return 2
    try:
        # S3 repositories (`s3://...`) are served from local copies, synced again before
        # each index, load and poll, removed at exit (thawserver.s3_repository).
        args, localized_repositories = localized(args, os.environ)
    except RepositorySourceError as exc:
        print(f"thaw serve: error: {exc}", file=sys.stderr)
        return 1
    try:
        return _run(args, localized_repositories)
    finally:
        localized_repositories.close()


def _run(args: argparse.Namespace, repositories: LocalizedRepositories) -> int:
    try:
        config = build_config(args)
    except ConfigError as exc:
        print(f"thaw serve: error: {_as_typed(str(exc))}", file=sys.stderr)
        return 2
    for repository in config.repositories:
        # tritonserver's `--exit-on-error=false` keeps a server that failed to initialize
        # answering, not live (runtime.http.app); without it a missing repository is refused.
        if not repository.is_dir() and config.exit_on_error is not False:
            print(f"thaw serve: error: repository {repository} is not a directory", file=sys.stderr)
            return 2
    refusal = startup_models_refusal(
        config.model_control_mode, config.load_models, config.repositories
    )
    if refusal is not None:
        print(f"thaw serve: error: {refusal}", file=sys.stderr)
        return 1
    log = LogControl(config.log_settings, quietest=logging.getLevelName(config.log_floor.upper()))
    try:
        log.install()
    except OSError as exc:
        print(f"thaw serve: error: cannot open --log-file: {exc}", file=sys.stderr)
        return 2
    log_ignored(args, config.backend_config)
    # The HTTP and gRPC ports at their caps at once.
    limits = bounded_by_fd_limit(
        config.connections, explicit=args.max_connections is not None, listeners=2
    )
    config = dataclasses.replace(config, connections=limits)
    # Before grpc is imported: this process starts children by fork+exec only, and a fork
    # server forks before grpc is ever initialised (it only imports grpc), so grpc's fork
    # handlers (and their "skipping fork() handlers" log line per child) are not needed.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    if config.fork_server_fd is not None:
        from runtime.process.zygote import ZygoteSettings, serve_fork_server

        images = config.cache is not None or config.store is not None
        settings = ZygoteSettings(
            frameworks=config.preload_frameworks,
            images=images,
            grpc=config.allow_grpc,
            gpu_scan=config.target != "cpu",
        )
        return serve_fork_server(config.fork_server_fd, settings, main)
    sync = repositories if repositories.any_remote else None
    return _run_loop(_serve(config, log, sync), config.event_loop)


def main(argv: list[str]) -> int:
    """`thaw serve ARGV` in this process (how a forked warm-pool child becomes a server)."""
    parser = argparse.ArgumentParser(prog="thaw")
    register(parser.add_subparsers(dest="command"))
    return run(parser.parse_args(["serve", *argv]))


def _as_typed(message: str) -> str:
    """`message` naming each setting as its flag is typed (thawserver.flag_names)."""
    subparsers = argparse.ArgumentParser(prog="thaw").add_subparsers()
    register(subparsers)
    (serve,) = subparsers.choices.values()
    return as_typed(message, serve)


def _run_loop(main: Coroutine[Any, Any, int], event_loop: str) -> int:
    """Run `main` on uvloop when asked (or, for `auto`, when installed), else on asyncio."""
    if event_loop != "asyncio":
        try:
            import uvloop
        except ImportError:
            if event_loop == "uvloop":
                main.close()
                print(
                    "thaw serve: error: --event-loop uvloop, but uvloop is not installed",
                    file=sys.stderr,
                )
                return 2
        else:
            return uvloop.run(main)
    return asyncio.run(main)


def _device_target(config: ServeConfig) -> DeviceTarget:
    """`--target` on this machine, resolved once (an `auto` scan creates no CUDA context)."""
    target = local_target(config.target, config.min_compute_capability)
    logger.info("target %s: %s (%s)", config.target, target.image_target, target.reason)
    return target


async def _serve(config: ServeConfig, log: LogControl, sync: RepositorySync | None) -> int:
    # Imported here so `thaw serve --help` stays fast.
    from runtime.direct.front_door import FrontDoor
    from runtime.http.app import HANDLERS, SERVER_STATE, SETTINGS, SHARED_MEMORY, build_app
    from runtime.models.manager import ModelManager
    from runtime.observe.metrics import Metrics
    from runtime.observe.tracing import RequestTracer
    from runtime.process.server import serve_app
    from thawwire.trace_settings import TraceSettings

    arena = None
    warmups: tuple[Callable[[], object], ...] = ()
    if config.arena_bytes:
        from snapshotter import Arena

        arena = Arena(config.arena_bytes)
        warmups = (arena.prefault,)
    metrics = Metrics(settings=config.metrics_settings)
    target = _device_target(config)
    cuda = None
    if wants_cuda_warmup(config, target):
        from runtime.process.cuda_warmup import CudaWarmup

        cuda = CudaWarmup(config, metrics=metrics, arena=arena, gpus=target.gpus)
        warmups = (*warmups, cuda.run)  # after the arena is pre-faulted: it pins that arena
    image_loader = None
    if config.store or config.cache:
        from runtime.models.image_cache import ImageCacheCollector, make_image_loader

        # After CudaWarmup: its pinned staging pool (allocated when the warm-up runs) is the
        # ring every restore into a GPU copies through.
        image_loader = make_image_loader(
            config, staging=cuda.staging if cuda else None, target=target
        )
        metrics.registry.register(ImageCacheCollector(image_loader))
    spares = None
    if config.python_spare_stubs or config.python_spare_stubs_auto:
        from runtime.models.repository_spares import spare_plan
        from runtime.python.spare_stubs import SpareStubs, SpareStubsCollector

        # `auto` is read in the warm-up (`fill`), off the loop.
        plan = functools.partial(spare_plan, config) if config.spares_from_repository else None
        spares = SpareStubs(
            config.python_spare_stubs, imports=config.python_spare_stub_imports, plan=plan
        )
        warmups = (*warmups, spares.fill)
        metrics.registry.register(SpareStubsCollector(spares))
    # Under `thaw up`: the one client back to its front door (forwarded requests, BLS, steps).
    front_door = FrontDoor.from_config(config)
    tracer = RequestTracer(TraceSettings(config.trace_defaults))
    manager = ModelManager(
        config,
        metrics=metrics,
        image_loader=image_loader,
        arena=arena,
        device_target=target,
        front_door=front_door,
        tracer=tracer,
        repository_sync=sync,
        spare_stubs=spares,
    )
    app = build_app(
        config, manager, metrics, warmups=warmups, front_door=front_door, log=log, tracer=tracer
    )
    grpc_routes = None
    if config.allow_grpc:
        from runtime.grpc.handlers import GrpcHandlers  # grpc only where it is served

        http_handlers = app[HANDLERS]

        async def sync_front_stats() -> None:
            # The native front's answers (set once it runs: runtime.process.native_front).
            if http_handlers.front is not None:
                await http_handlers.front.sync_stats()

        grpc_routes = GrpcHandlers(
            config, manager, app[SERVER_STATE], shared_memory=app[SHARED_MEMORY],
            settings=app[SETTINGS], tracer=tracer, sync_front_stats=sync_front_stats,
        ).routes()  # fmt: skip
    status = await serve_app(app, config, grpc_routes=grpc_routes)
    if not app[SERVER_STATE].stopped_cleanly:
        # A model thread is stuck; asyncio.run would wait for it forever. Leave now.
        logging.shutdown()
        sys.stdout.flush()
        os._exit(status)
    return status
