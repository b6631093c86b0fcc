"""`thaw up`'s flag checks: a parsed flag's value, or a combination of flags, refused with a
ConfigError that names the flag, else the value the config takes.

cli calls them while it builds the ActivatorConfig from the parsed flags.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from activator.errors import ConfigError
from activator.scaler.local.host_tier import default_budget_bytes
from thawserver import ranges
from thawserver.backend_config_flags import backend_settings
from thawserver.cache_flags import cache_bytes
from thawserver.connection_limits import LIMIT_RANGES, ConnectionLimits, out_of_range
from thawserver.device_flags import replica_device_args
from thawserver.limit_flags import limits_from_args
from thawserver.rate_limit_flags import RateLimitMode, parse_mode, parse_resource
from thawwire.model_control import LOAD_MODEL_NOT_EXPLICIT, POLL_SECS_RANGE, ModelControlMode
from thawwire.openai_api import DEFAULT_MAX_TOKENS, DEFAULT_MAX_TOOL_CALL_PARSE_BYTES
from thawwire.runtime_parameters import spare_imports_auto

__all__ = [
    "POLL_NOT_ON_KUBERNETES",
    "backend_config_args",
    "backend_directory",
    "check_range",
    "connection_limits",
    "device_args",
    "extra_port",
    "header_forward_pattern",
    "host_cache_bytes",
    "load_models",
    "rate_limit_args",
    "refuse_local_only_flags",
    "repository_poll_s",
    "response_cache_bytes",
]


def check_range(flag: str, value: float, low: float, high: float) -> None:
    problem = ranges.out_of_range(flag, value, low, high)
    if problem is not None:
        raise ConfigError(problem)


def extra_port(flag: str, given: int | None, allowed: bool, default: int, http: int) -> int | None:
    """A Triton port of `thaw up`: None when not allowed; with `--port 0`, a free one unless
    given (processes side by side never collide)."""
    if not allowed:
        return None
    port = given if given is not None else (0 if http == 0 else default)
    check_range(flag, port, 0, 65535)
    return port


def connection_limits(args: argparse.Namespace) -> ConnectionLimits:
    limits = limits_from_args(args)
    problem = out_of_range(limits, {name: "--" + name.replace("_", "-") for name in LIMIT_RANGES})
    if problem is not None:
        raise ConfigError(problem)
    return limits


def host_cache_bytes(given: int | None, *, kubernetes: bool) -> int:
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
    check_range("--host-cache-bytes", budget, 0, 1 << 44)
    return budget


def header_forward_pattern(flag: str, text: str) -> str:
    """`text`, once it compiles as the replica compiles it (runtime.header_forward: a leading
    `(?-i)` is RE2's case-sensitive switch, not Python's); ConfigError naming the flag if not."""
    try:
        re.compile(text.removeprefix("(?-i)"))
    except re.error as exc:
        raise ConfigError(f"{flag} {text!r} is not a regular expression: {exc}") from None
    return text


def response_cache_bytes(args: argparse.Namespace) -> int:
    """The replicas' response cache (thawserver.cache_flags); ConfigError as thaw serve's."""
    try:
        return cache_bytes(args.cache_config, args.response_cache_byte_size)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def rate_limit_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The replicas' rate-limiter flags (thawserver.rate_limit_flags), checked here first so a
    bad value stops `thaw up` at start, in Triton's words, rather than every replica."""
    try:
        mode = parse_mode(args.rate_limit)
        resources = [parse_resource(text) for text in args.rate_limit_resource]
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if mode is RateLimitMode.OFF and not resources:
        return ()
    flags = [f"--rate-limit-resource={text}" for text in args.rate_limit_resource]
    return (f"--rate-limit={mode.value}", *flags)


def backend_config_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The replicas' `--backend-config` flags (thawserver.backend_config_flags), checked here
    first so a malformed one stops `thaw up` at start, in Triton's words, not every replica."""
    try:
        backend_settings(args.backend_config)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return tuple(f"--backend-config={text}" for text in args.backend_config)


def device_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The replicas' device flags (`--cuda-memory-pool-byte-size`, `--model-load-gpu-limit`,
    `--pinned-memory-pool-byte-size`, `--model-load-thread-count`: thawserver.device_flags),
    checked here first so a malformed one stops `thaw up` at start, not every replica."""
    try:
        return replica_device_args(args)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def backend_directory(args: argparse.Namespace, *, kubernetes: bool) -> Path | None:
    directory: Path | None = args.backend_directory
    if directory is None:
        return None
    if kubernetes:
        raise ConfigError(
            "--backend-directory is not supported with --scaler kubernetes yet (the pods would "
            "need the directory too); put model.py in each model's version folder with "
            'backend: "python" instead'
        )
    if not directory.is_dir():
        raise ConfigError(f"--backend-directory {str(directory)!r} is not a directory")
    return directory.resolve()


def load_models(args: argparse.Namespace) -> tuple[str, ...]:
    if args.load_model and args.model_control_mode != "explicit":
        raise ConfigError(LOAD_MODEL_NOT_EXPLICIT)  # tritonserver's words, as thaw serve
    return tuple(dict.fromkeys(args.load_model))


POLL_NOT_ON_KUBERNETES = (
    "--model-control-mode poll is not supported with --scaler kubernetes: each activator would "
    "read its own copy of the repository, and the replicas load theirs from the image store; "
    "roll the activators to pick up repository changes"
)


def repository_poll_s(args: argparse.Namespace, *, kubernetes: bool) -> float | None:
    """`--model-control-mode poll`: seconds between reads of the repository
    (`--repository-poll-secs`, as tritonserver's and thaw serve's); None in other modes."""
    if args.model_control_mode != ModelControlMode.POLL:
        return None
    if kubernetes:
        raise ConfigError(POLL_NOT_ON_KUBERNETES)
    check_range("--repository-poll-secs", args.repository_poll_secs, *POLL_SECS_RANGE)
    return float(args.repository_poll_secs)


def _in_the_chart(flags_reach: str) -> str:
    """The refusal of replica flags given to `thaw up --scaler kubernetes`: where they go."""
    return (
        f"{flags_reach} replicas with --scaler local only: on Kubernetes the runtime pods' flags "
        "are the Helm chart's pool template; give them as its runtime.extraArgs (every pool) "
        "or a pool's extraArgs"
    )


def refuse_local_only_flags(args: argparse.Namespace) -> None:
    """ConfigError for a flag only `--scaler local` takes (given with `--scaler kubernetes`)."""
    if args.http_header_forward_pattern or args.grpc_header_forward_pattern:
        raise ConfigError("--http/--grpc-header-forward-pattern need --scaler local")
    if response_cache_bytes(args):
        raise ConfigError("--cache-config / --response-cache-byte-size need --scaler local")
    if rate_limit_args(args):
        raise ConfigError("--rate-limit / --rate-limit-resource need --scaler local")
    if args.metrics_config or not (args.allow_cpu_metrics and args.allow_gpu_metrics):
        raise ConfigError(_in_the_chart("--metrics-config and --allow-cpu/gpu-metrics=false reach"))
    if backend_config_args(args):
        raise ConfigError(_in_the_chart("--backend-config reaches"))
    if args.model_load_retries:
        raise ConfigError(_in_the_chart("--model-load-retry-count reaches"))
    if args.model_config_name:
        raise ConfigError(_in_the_chart("--model-config-name reaches"))
    if device_args(args):
        raise ConfigError(
            _in_the_chart(
                "--cuda-memory-pool-byte-size, --model-load-gpu-limit, "
                "--pinned-memory-pool-byte-size, --model-load-thread-count and "
                "--min-supported-compute-capability reach"
            )
        )
    # The runtime pods' command line is the Helm chart's pool template, not thaw up's: say where
    # these go instead of letting them do nothing.
    if args.tool_call_parser:
        raise ConfigError(
            f"--tool-call-parser {args.tool_call_parser} reaches replicas with --scaler local "
            "only: on Kubernetes the runtime pods' flags are the Helm chart's; set its value "
            f"runtime.toolCallParser={args.tool_call_parser} instead"
        )
    if args.max_tool_call_parse_bytes != DEFAULT_MAX_TOOL_CALL_PARSE_BYTES:
        raise ConfigError(
            f"--max-tool-call-parse-bytes {args.max_tool_call_parse_bytes} reaches replicas with "
            "--scaler local only: on Kubernetes the runtime pods' flags are the Helm chart's; "
            f"set its value runtime.maxToolCallParseBytes={args.max_tool_call_parse_bytes} instead"
        )
    spare_imports_given = not spare_imports_auto(args.python_spare_stub_imports)
    if args.python_spare_stubs is not None or spare_imports_given:
        raise ConfigError(
            "--python-spare-stubs / --python-spare-stub-imports reach replicas with --scaler "
            "local only: on Kubernetes the runtime pods' flags are the Helm chart's; set its "
            "values runtime.pythonSpareStubs / runtime.pythonSpareStubImports instead"
        )
    if args.default_max_tokens != DEFAULT_MAX_TOKENS:
        raise ConfigError(
            f"--default-max-tokens {args.default_max_tokens} reaches replicas with --scaler "
            "local only: on Kubernetes the runtime pods' flags are the Helm chart's; set its "
            f"value runtime.defaultMaxTokens={args.default_max_tokens} instead"
        )
