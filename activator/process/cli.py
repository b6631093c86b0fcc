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
from activator.process.body_limit_cli import internal_calls
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
from activator.process.kube_cli import kubernetes_config, placement
from activator.process.local_cli import auto_spare_imports, local_config, spare_stubs_for
from activator.process.repository_cli import (
    check_startup_models,
    load_refusals,
    models_loaded_at_start,
    rate_limit_refusals,
    refusal_text,
    refuse_remote_on_kubernetes,
    refused_at_start,
    repository_settings,
    start_warnings,
)
from activator.process.serving import ListenError, LoadAtStartError, loop_factory, serve
from activator.process.shared_cli import (
    shared_replica_concurrency,
)
from activator.process.up_flags import DESCRIPTION, add_up_arguments
from activator.scaler.backend import ScalerKind
from activator.scaler.kube_config import KubernetesConfig
from activator.scaler.local.host_tier import make_tier_dir, remove_tier_dir
from activator.scaler.local_config import LocalConfig
from thawserver import lora_flags, max_tokens_flag
from thawserver.fd_limit import bounded_by_fd_limit
from thawserver.flag_names import as_typed
from thawserver.grpc_keepalive import keepalive_from
from thawserver.grpc_tls import tls_from_args
from thawserver.log_control import LogControl
from thawserver.log_records import log_to_stderr
from thawserver.metrics_config_flags import metrics_settings as metrics_flags
from thawserver.python_imports import spare_imports
from thawserver.repository_flags import localized, names_s3
from thawserver.restricted_protocols import (
    parse_http_restrictions,
    parse_restrictions,
)
from thawserver.reuse_port_flags import check_reuse_port
from thawserver.s3_repository.errors import RepositorySourceError
from thawserver.s3_repository.localize import LocalizedRepositories
from thawserver.settings_flags import (
    log_settings,
    trace_flag_warnings,
    trace_setting,
)
from thawserver.stub_instances import stub_instances
from thawserver.tool_call_flags import replica_environment
from thawserver.triton_flag_names import log_ignored_flags
from thawwire.model_control import ModelControlMode
from thawwire.openai_api import MAX_TOKENS_LIMIT
from thawwire.runtime_parameters import SPARE_STUB_IMPORTS_MAX

__all__ = ["register", "run"]

logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `up` to the `thaw` command line (its flags: activator.process.up_flags)."""
    p = subparsers.add_parser(
        "up",
        help="run the platform (activator + warm pool + cache) on this machine",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_up_arguments(p)
    p.set_defaults(func=run)


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
        metrics_settings = metrics_flags(args)
        check_reuse_port(args)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    host_bytes = host_cache_bytes(args.host_cache_bytes, kubernetes=kubernetes)
    cache = args.cache or (None if kubernetes else Path(os.path.expanduser("~/.cache/thaw/images")))
    return ActivatorConfig(
        **repositories,
        metrics_settings=metrics_settings,
        host=args.http_address or args.host,
        grpc_host=args.grpc_address or args.host,
        metrics_host=args.metrics_address or args.host,
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
        reuse_http_port=args.reuse_http_port,
        reuse_grpc_port=args.reuse_grpc_port,
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
    log_to_stderr(args.log_level.upper())  # until the config is read (then LogControl below)
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

    for warning in start_warnings(args) + trace_flag_warnings(args):
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
            default_max_batch_size=config.default_max_batch_size,
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
    at_start = models_loaded_at_start(
        config.load_models, explicit=config.model_control, servable=repository.names()
    )
    for name, reason in rate_limit_refusals(repository, at_start, args).items():
        repository.withhold(name, reason)  # as tritonserver's load of it at start refuses
    unavailable = dict(repository.unavailable)
    if config.exit_on_error:  # every model the start loads is checked, as tritonserver's load
        loaded = [name for name in at_start if name not in unavailable]
        unavailable.update(load_refusals(repository, loaded))
    refused = refused_at_start(
        unavailable, exit_on_error=config.exit_on_error,
        explicit=config.model_control, load_models=config.load_models,
    )  # fmt: skip
    if refused:  # as `thaw serve --exit-on-error=true` refuses it, exit 1
        for name, reason in refused.items():  # a line per model, as thaw serve's log has
            print(f"thaw up: error: failed to load '{name}': {reason}", file=sys.stderr)
        print(f"thaw up: error: {refusal_text(refused)}", file=sys.stderr)
        return 1
    log = LogControl(config.log_settings, quietest=logging.getLevelName(config.log_floor.upper()))
    try:
        log.install()
    except OSError as exc:
        print(f"thaw up: error: cannot open --log-file: {exc}", file=sys.stderr)
        return 2
    log_ignored_flags(args, logger)  # as thaw serve: one warning per flag without effect
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
    if isinstance(config.scaler, LocalConfig):
        entries = [repository.get(m) for m in repository.names()]
        found = None
        if auto_spare_imports(args) and args.python_spare_stubs != 0:  # 0: no spare to import
            found = spare_imports(entries, SPARE_STUB_IMPORTS_MAX)
        instances = stub_instances(entry.config for entry in entries)
        local = spare_stubs_for(config.scaler, args.python_spare_stubs, instances, found)
        if found and local.python_spare_stubs:
            logger.info(
                "spare Python stubs import %s ahead (what the Python models import; "
                "--python-spare-stub-imports '' for none)", ", ".join(found),
            )  # fmt: skip
        config = dataclasses.replace(config, scaler=local)
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
