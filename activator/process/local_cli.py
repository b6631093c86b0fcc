"""The `thaw up --scaler local` (the default) flags' `LocalConfig`: the warm pool, the replicas'
framework preloads and target, direct connections, shared placement, and what every replica is
started with (its log level, header forwarding, response cache, rate limiter, backend
settings). The flags are `thaw up`'s (activator.process.cli); the Kubernetes scaler's are
activator.process.kube_cli's.
"""

from __future__ import annotations

import argparse
import dataclasses

from activator.errors import ConfigError
from activator.process.flag_checks import (
    backend_config_args,
    check_range,
    device_args,
    header_forward_pattern,
    rate_limit_args,
    response_cache_bytes,
)
from activator.process.shared_cli import shared_settings
from activator.scaler.local_config import LocalConfig, PoolSettings
from thawserver.rate_limit_flags import RateLimitMode, parse_mode, parse_resource
from thawwire.runtime_parameters import (
    PYTHON_SPARE_STUBS_MAX,
    spare_imports_auto,
    spare_stub_imports,
)

__all__ = ["auto_spare_imports", "local_config", "spare_stubs_for"]


def local_config(args: argparse.Namespace) -> LocalConfig:
    """The local scaler's config from `thaw up`'s flags; ConfigError names a bad one."""
    frameworks = tuple(f for f in args.preload_frameworks.split(",") if f.strip())
    if args.python_spare_stubs is not None:
        check_range("--python-spare-stubs", args.python_spare_stubs, 0, PYTHON_SPARE_STUBS_MAX)
    imports: tuple[str, ...] = ()
    if not auto_spare_imports(args):  # auto: read from the repository (spare_stubs_for)
        try:
            imports = spare_stub_imports(
                "--python-spare-stub-imports", args.python_spare_stub_imports
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    pool = PoolSettings(
        min_idle=args.warm_pool,
        window_s=args.pool_window_s,
        budget_bytes=args.pool_memory_bytes,
    )
    return LocalConfig(
        pool=pool,
        preload_frameworks=frameworks,
        python_spare_stubs=1 if args.python_spare_stubs is None else args.python_spare_stubs,
        python_spare_stub_imports=imports,
        fork_server=args.fork_server == "on",
        target=args.target,
        arena_bytes=args.arena_bytes,
        direct_max_age_s=args.direct_max_age_s,
        shared=shared_settings(args),
        replica_log_level=args.log_level,
        http_header_forward_pattern=header_forward_pattern(
            "--http-header-forward-pattern", args.http_header_forward_pattern
        ),
        grpc_header_forward_pattern=header_forward_pattern(
            "--grpc-header-forward-pattern", args.grpc_header_forward_pattern
        ),
        response_cache_bytes=response_cache_bytes(args),
        rate_limit_args=rate_limit_args(args),
        rate_limited=parse_mode(args.rate_limit) is RateLimitMode.EXECUTION_COUNT,
        rate_limit_resources=tuple(parse_resource(text) for text in args.rate_limit_resource),
        backend_config_args=backend_config_args(args),
        model_config_name=args.model_config_name or "",
        model_load_retries=args.model_load_retries,
        device_args=device_args(args),
    )


def auto_spare_imports(args: argparse.Namespace) -> bool:
    """Whether the spares' imports are `thaw up`'s to find (`auto`, the default)."""
    return spare_imports_auto(args.python_spare_stub_imports)


def spare_stubs_for(
    local: LocalConfig,
    given: int | None,
    instances: int,
    found_imports: tuple[str, ...] | None = None,
) -> LocalConfig:
    """`--python-spare-stubs` as given; not given, as many as the Python model of the
    repository at start with the most stub instances runs (`instances`:
    thawserver.stub_instances; at
    most PYTHON_SPARE_STUBS_MAX), so its whole load takes spares; 0 without one: a deployment
    of ONNX models keeps no idle interpreter in its pool processes. `found_imports`: what the
    spares import when `--python-spare-stub-imports` was left to `thaw up`
    (thawserver.python_imports; None: the flag named them)."""
    wanted = (
        local.python_spare_stubs if given is not None else min(instances, PYTHON_SPARE_STUBS_MAX)
    )
    imports = local.python_spare_stub_imports if found_imports is None else found_imports
    return dataclasses.replace(local, python_spare_stubs=wanted, python_spare_stub_imports=imports)
