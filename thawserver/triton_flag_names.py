"""tritonserver 2.51's command line as both CLIs meet it: every flag it has (`TRITON_FLAGS`),
those Thaw accepts without effect (`IGNORED_FLAGS`, logged), and the refusal of any other by
name.

    add_ignored_flags(group, parser)     each IGNORED_FLAGS flag `parser` does not define yet
    log_ignored_flags(args, logger)      one warning per ignored flag given
    add_unsupported_flags(parser, cmd)   the rest: exit 2, "tritonserver flag --X is not
                                         supported by thaw <cmd>" (call it last)

`thaw serve` (runtime.process.triton_flags) and `thaw up` (activator.process.up_flags) both
take a launch script written for tritonserver: a flag is applied, accepted and logged as
ignored, or refused naming it — never argparse's generic "unrecognized arguments".
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

__all__ = [
    "IGNORED_FLAGS",
    "TRITON_FLAGS",
    "add_ignored_flags",
    "add_unsupported_flags",
    "ignored_dest",
    "log_ignored_flags",
]

# Every long option of tritonserver 2.51 (src/command_line_parser.cc, v2.51.0).
_TRITON_FLAG_NAMES = """
allow-cpu-metrics allow-gpu-metrics allow-grpc allow-http allow-metrics allow-sagemaker
allow-vertex-ai backend-config backend-directory buffer-manager-thread-count cache-config
cache-directory cuda-memory-pool-byte-size cuda-virtual-address-size
disable-auto-complete-config enable-peer-access exit-on-error exit-timeout-secs grpc-address
grpc-header-forward-pattern grpc-http2-max-ping-strikes grpc-http2-max-pings-without-data
grpc-http2-min-recv-ping-interval-without-data grpc-infer-allocation-pool-size
grpc-infer-response-compression-level grpc-keepalive-permit-without-calls grpc-keepalive-time
grpc-keepalive-timeout grpc-max-connection-age grpc-max-connection-age-grace grpc-port
grpc-restricted-protocol grpc-root-cert grpc-server-cert grpc-server-key grpc-use-ssl
grpc-use-ssl-mutual help host-policy http-address http-header-forward-pattern http-port
http-restricted-api http-thread-count id load-model log-error log-file log-format log-info
log-verbose log-warning metrics-address metrics-config metrics-interval-ms metrics-port
min-supported-compute-capability model-config-name model-control-mode model-load-gpu-limit
model-load-retry-count model-load-thread-count model-namespacing model-repository model-store
pinned-memory-pool-byte-size rate-limit rate-limit-resource repoagent-directory
repository-poll-secs response-cache-byte-size reuse-grpc-port reuse-http-port sagemaker-port
sagemaker-safe-port-range sagemaker-thread-count strict-model-config strict-readiness
trace-config trace-count trace-file trace-level trace-log-frequency trace-rate
vertex-ai-default-model vertex-ai-port vertex-ai-thread-count
"""
TRITON_FLAGS: frozenset[str] = frozenset(_TRITON_FLAG_NAMES.split())

# Accepted and ignored (logged): tuning of Triton's own machinery that Thaw does not have.
IGNORED_FLAGS: dict[str, str] = {
    "http-thread-count": "thaw's HTTP server runs on one event loop",
    "buffer-manager-thread-count": "thaw has no buffer manager threads",
    "metrics-interval-ms": "thaw computes metrics when scraped",
    "grpc-infer-allocation-pool-size": "thaw's gRPC server keeps no pool of call states",
    "cache-directory": "thaw's response cache is built in",
    "vertex-ai-thread-count": "thaw's Vertex AI port runs on the server's event loop",
    "sagemaker-thread-count": "thaw's SageMaker port runs on the server's event loop",
    "repoagent-directory": "thaw's repository agents are built in (checksum)",
    "host-policy": "thaw binds no instance to a NUMA node or CPU cores",
    "enable-peer-access": "thaw copies no tensor from one GPU to another",
    "cuda-virtual-address-size": "thaw's implicit sequence state is not growable CUDA memory",
}


def ignored_dest(flag: str) -> str:
    """The namespace attribute an ignored flag's value lands in."""
    return "ignored_" + flag.replace("-", "_")


def _defined(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    # argparse has no public view of the defined options; `_option_string_actions` (a dict,
    # option string -> action, in every argparse since 2.7) is read here only, and a test pins it.
    return parser._option_string_actions


def add_ignored_flags(group: argparse._ActionsContainer, parser: argparse.ArgumentParser) -> None:
    """Each `IGNORED_FLAGS` flag that `parser` does not define yet, on `group` (a value, shown
    in `--help` with why it has no effect)."""
    defined = _defined(parser)
    for flag, why in IGNORED_FLAGS.items():
        if f"--{flag}" not in defined:
            group.add_argument(f"--{flag}", dest=ignored_dest(flag), default=None,
                               metavar="VALUE", help=why)  # fmt: skip


def log_ignored_flags(args: argparse.Namespace, logger: logging.Logger) -> None:
    """One warning per ignored flag given (those `add_ignored_flags` defined)."""
    for flag, why in IGNORED_FLAGS.items():
        value = getattr(args, ignored_dest(flag), None)
        if value is not None:
            logger.warning("ignoring tritonserver flag --%s=%s: %s", flag, value, why)


class _Unsupported(argparse.Action):
    """A tritonserver flag Thaw does not have: exit 2 naming it."""

    def __init__(self, *args: Any, command: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.command = command

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        parser.error(f"tritonserver flag {option_string} is not supported by thaw {self.command}")


def add_unsupported_flags(parser: argparse.ArgumentParser, command: str) -> None:
    """Catch every tritonserver flag `parser` does not define (call it after every definition,
    or make the parser with `conflict_handler="resolve"` so that a later definition replaces
    the catch)."""
    defined = _defined(parser)
    for flag in sorted(TRITON_FLAGS):
        if f"--{flag}" in defined:
            continue  # Thaw has it
        parser.add_argument(
            f"--{flag}", action=_Unsupported, nargs="?", dest=f"unsupported_{flag}",
            default=argparse.SUPPRESS, help=argparse.SUPPRESS, command=command,
        )  # fmt: skip
