"""tritonserver's command line on `thaw serve`: the flags Thaw applies, those it accepts without
effect, and a refusal naming any other tritonserver flag.

A launch script written for `tritonserver` runs unchanged when it uses what Thaw has:
`--model-repository=DIR` (repeatable; `--model-store` too), `--http-port`, `--grpc-port`,
`--metrics-port` and their `--*-address`, `--reuse-http-port`, `--reuse-grpc-port`
(thawserver.reuse_port_flags), `--allow-http|grpc|metrics`, `--strict-readiness`,
`--exit-on-error`, `--disable-auto-complete-config`, `--strict-model-config`, `--log-verbose`
(and `--log-info|warning|error`, `--log-file`, `--log-format`), `--trace-config` (and the
deprecated `--trace-file|level|rate|count|log-frequency`), `--backend-config`,
`--model-load-thread-count`, `--model-load-gpu-limit`, `--model-namespacing`, `--rate-limit`,
`--rate-limit-resource`,
`--metrics-config`, `--allow-cpu-metrics`, `--allow-gpu-metrics`,
`--http-header-forward-pattern`, `--grpc-header-forward-pattern`, `--grpc-restricted-protocol`,
`--http-restricted-api`, `--grpc-infer-response-compression-level`, `--grpc-use-ssl`,
`--grpc-use-ssl-mutual`, `--grpc-server-cert|key`, `--grpc-root-cert` (thawserver.grpc_tls);
Triton's booleans take
`true|false|1|0|on|off` as `--flag=VALUE` or `--flag VALUE`. `--backend-directory` is where
Python-based backends are found (`DIR/NAME/model.py`, as Triton runs vllm_backend); Thaw's own
backends are built in. Performance knobs with no meaning here (thread counts of Triton's C++
frontends, `--host-policy`, `--enable-peer-access`, `--cuda-virtual-address-size`) are
accepted and logged as ignored. `--min-supported-compute-capability` and the GPU flags are
serve_flags'. That is every flag of tritonserver 2.51 (`src/command_line_parser.cc`); one a
later tritonserver adds would exit 2 with "tritonserver flag --X is not supported by thaw
serve" (thawserver.triton_flag_names), never argparse's generic "unrecognized arguments".

Thaw's own durations are spelled as on `thaw up`, `-s` (`--head-timeout-s`); the
tritonserver-style `-secs` spellings `thaw serve` had for them stay accepted as aliases that
`--help` does not show (`SECS_ALIASES`). tritonserver's own flags keep tritonserver's names
(`--exit-timeout-secs`, `--repository-poll-secs`).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

from runtime.process.sagemaker_flags import add_sagemaker_arguments
from runtime.process.vertex_ai_flags import add_vertex_ai_arguments
from thawserver.backend_config_flags import (
    BackendSetting,
    add_backend_config_argument,
    backend_settings,
)
from thawserver.bool_flag import triton_bool
from thawserver.grpc_compression import add_compression_argument
from thawserver.grpc_keepalive import add_keepalive_arguments
from thawserver.grpc_tls import add_tls_arguments
from thawserver.metrics_config_flags import add_metrics_config_argument
from thawserver.model_config_name_flag import add_model_config_name_argument
from thawserver.rate_limit_flags import add_rate_limit_arguments
from thawserver.restricted_protocols import add_restriction_arguments
from thawserver.reuse_port_flags import add_reuse_port_arguments
from thawserver.settings_flags import add_log_flags, add_trace_flags
from thawserver.triton_flag_names import (
    IGNORED_FLAGS,
    TRITON_FLAGS,
    add_ignored_flags,
    log_ignored_flags,
)
from thawserver.triton_flag_names import add_unsupported_flags as add_unsupported

__all__ = [
    "IGNORED_FLAGS",
    "SECS_ALIASES",
    "TRITON_FLAGS",
    "BackendSetting",
    "add_secs_aliases",
    "add_triton_flags",
    "add_unsupported_flags",
    "applied",
    "backend_settings",
    "log_ignored",
    "triton_bool",
]

logger = logging.getLogger(__name__)

# Thaw's durations (thawserver.limit_flags) by the tritonserver-style spelling `thaw serve` had
# for them -> the primary flag, the one both CLIs show.
SECS_ALIASES: dict[str, str] = {
    "--head-timeout-secs": "--head-timeout-s",
    "--idle-timeout-secs": "--idle-timeout-s",
    "--body-timeout-secs": "--body-timeout-s",
}


# Backend settings Thaw accepts, by (backend, setting); every other one is logged as ignored.
# The python backend's shared-memory and stub settings are kept in ServeConfig.backend_config
# for its instances (`ServeConfig.backend_setting("python", KEY)`).
_PYTHON_SETTINGS = frozenset(
    {
        "shm-default-byte-size",
        "shm-growth-byte-size",
        "shm-region-prefix-name",
        "shm_message_queue_size",
        "stub-timeout-seconds",
        "thread-pool-size",
    }
)


def add_triton_flags(p: argparse.ArgumentParser) -> None:
    """The tritonserver flags Thaw applies, as one group of `thaw serve`'s options.

    `--http-port` is `--port`'s Triton name (added with it); `--http-address` sets HTTP's
    address alone (added with `--host`, every listener's default address).
    """
    g = p.add_argument_group("tritonserver-compatible flags")
    g.add_argument(
        "--model-repository", "--model-store", dest="model_repositories", action="append",
        default=[], metavar="DIR",
        help="a model repository (repeatable, as tritonserver's; with REPO, models of all of "
        "them are served; a model name in two repositories is unavailable, unless "
        "--model-namespacing)",
    )  # fmt: skip
    g.add_argument("--model-namespacing", type=triton_bool, default=False, metavar="BOOL",
                   help="each model repository is a namespace (default false): a name may be in "
                   "several, an ensemble's steps resolve in its own, a request for a name in "
                   "more than one is refused (runtime.models.namespaces)")  # fmt: skip
    g.add_argument("--grpc-port", type=int, default=None, metavar="PORT",
                   help="KServe v2 gRPC port (default 8001; 0 with --port 0)")  # fmt: skip
    g.add_argument("--grpc-address", default=None, metavar="HOST",
                   help="gRPC bind address (default: --host, not --http-address)")  # fmt: skip
    g.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                   help="Prometheus /metrics port (default 8002; 0 with --port 0); /metrics "
                   "is also served on the HTTP port")  # fmt: skip
    g.add_argument("--metrics-address", default=None, metavar="HOST",
                   help="metrics bind address (default: --host, not --http-address)")  # fmt: skip
    add_reuse_port_arguments(g)
    for name, what in (("http", "the KServe v2 HTTP"), ("grpc", "the gRPC")):
        # None: not given (AIP_MODE=PREDICTION turns them off: runtime.process.vertex_ai_flags)
        g.add_argument(f"--allow-{name}", type=triton_bool, default=None, metavar="BOOL",
                       help=f"serve {what} endpoint (default true, false when "
                       "AIP_MODE=PREDICTION)")  # fmt: skip
    g.add_argument("--allow-metrics", type=triton_bool, default=True, metavar="BOOL",
                   help="serve the metrics endpoint (default true)")  # fmt: skip
    add_vertex_ai_arguments(g)
    add_sagemaker_arguments(g)
    add_compression_argument(g, responses="gRPC responses")
    add_keepalive_arguments(g)
    add_model_config_name_argument(g, replicas=False)
    g.add_argument("--id", dest="server_id", default="triton", metavar="ID",
                   help="this server's identifier: the `name` of its server metadata "
                   "(default triton)")  # fmt: skip
    add_tls_arguments(g, where="the gRPC endpoint")
    g.add_argument(
        "--grpc-max-message-bytes", type=int, default=None, metavar="N",
        help="largest gRPC message accepted (RESOURCE_EXHAUSTED above; default --max-body-bytes)",
    )  # fmt: skip
    g.add_argument("--strict-readiness", type=triton_bool, default=True, metavar="BOOL",
                   help="ready only when every model to load is READY (default true); false: "
                   "ready once the server runs")  # fmt: skip
    g.add_argument("--exit-on-error", type=triton_bool, default=None, metavar="BOOL",
                   help="exit 1 when a model fails to load at start (default: serve the "
                   "others; tritonserver's default is true); false, given: a server that fails "
                   "to initialize (a missing repository) goes on answering, not live")  # fmt: skip
    g.add_argument("--disable-auto-complete-config", action="store_true",
                   help="do not complete configs from model files or model.py")  # fmt: skip
    g.add_argument(
        "--strict-model-config",
        type=triton_bool,
        default=None,
        metavar="BOOL",
        help="true = --disable-auto-complete-config (tritonserver's older name)",
    )
    add_log_flags(g)
    add_trace_flags(g)
    add_backend_config_argument(g)
    g.add_argument(
        "--backend-directory", type=Path, default=None, metavar="DIR",
        help="where Python-based backends are found: a config's backend NAME that thaw does not "
        "have runs DIR/NAME/model.py as a Python model (thaw's own backends are built in)",
    )  # fmt: skip
    g.add_argument("--model-load-retry-count", dest="model_load_retries", type=int, default=0,
                   metavar="N", help="try a model version whose load fails N more times, "
                   "as tritonserver (default 0)")  # fmt: skip
    g.add_argument("--model-load-thread-count", type=int, default=4, metavar="N",
                   help="models loaded at once (default 4)")  # fmt: skip
    add_rate_limit_arguments(g)
    add_metrics_config_argument(g)
    add_restriction_arguments(g)
    for surface, what in (("http", "HTTP headers"), ("grpc", "gRPC metadata")):
        g.add_argument(
            f"--{surface}-header-forward-pattern", default="", metavar="REGEX",
            help=f"{what} whose name matches (case-insensitive, anywhere in the name; a leading "
            "(?-i) makes it case-sensitive) reach the model as string request parameters",
        )  # fmt: skip
    quiet = p.add_argument_group("tritonserver flags accepted without effect (logged)")
    add_ignored_flags(quiet, p)


def add_secs_aliases(p: argparse.ArgumentParser) -> None:
    """Accept each `SECS_ALIASES` spelling (seconds) as its primary flag: the same setting,
    hidden from `--help` and the usage line. After the primaries are defined."""
    defined: dict[str, argparse.Action] = p._option_string_actions  # see add_unsupported_flags
    for alias, primary in SECS_ALIASES.items():
        p.add_argument(
            alias, dest=defined[primary].dest, type=float, metavar="S",
            default=argparse.SUPPRESS, help=argparse.SUPPRESS,
        )  # fmt: skip


def add_unsupported_flags(p: argparse.ArgumentParser) -> None:
    """Catch every tritonserver flag `thaw serve`'s parser does not define (made with
    `conflict_handler="resolve"`: a flag another part of `thaw serve` defines later replaces
    the catch, so the order of the definitions does not matter)."""
    add_unsupported(p, "serve")


def applied(setting: BackendSetting) -> bool:
    """Whether Thaw uses a backend setting (else it is accepted and logged as ignored):
    the python backend's shm and stub settings, and `default-max-batch-size` (global or the
    onnxruntime backend's: ONNX auto-complete's, tritonconfig.complete_config)."""
    backend, key, _ = setting
    if key == "default-max-batch-size":
        return backend in ("", "onnxruntime")
    return backend == "python" and key in _PYTHON_SETTINGS


def log_ignored(args: argparse.Namespace, settings: Sequence[BackendSetting]) -> None:
    """One log line per accepted flag or backend setting that has no effect in Thaw."""
    log_ignored_flags(args, logger)
    for setting in settings:
        backend, key, value = setting
        where = f"{backend}," if backend else ""
        if applied(setting):
            logger.info("backend config %s%s=%s accepted", where, key, value)
        else:
            logger.warning("ignoring backend config %s%s=%s: thaw does not use it", where, key,
                           value)  # fmt: skip
