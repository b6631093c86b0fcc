"""tritonserver's SageMaker flags for `thaw serve`, and the `SAGEMAKER_TRITON_*` environment
tritonserver's SageMaker port reads (src/sagemaker_server.h, v2.51.0).

    add_sagemaker_arguments(group)          --allow-sagemaker, --sagemaker-port,
                                            --sagemaker-safe-port-range
    apply_sagemaker_environment(args, env)  SAGEMAKER_TRITON_DEFAULT_MODEL_NAME and
                                            SAGEMAKER_TRITON_PING_MODE, on `args`
    sagemaker_settings(args)                ServeConfig's SageMaker fields
    port_range(text)                        `LOW-HIGH` -> (LOW, HIGH)
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from typing import Any

from runtime.http.sagemaker import DEFAULT_MODEL, PING_MODES
from thawserver.bool_flag import triton_bool

__all__ = [
    "add_sagemaker_arguments",
    "apply_sagemaker_environment",
    "port_range",
    "sagemaker_settings",
]

_RANGE = re.compile(r"\s*([0-9]{1,5})\s*-\s*([0-9]{1,5})\s*")


def port_range(text: str) -> tuple[int, int]:
    """`--sagemaker-safe-port-range LOW-HIGH` as tritonserver reads it."""
    match = _RANGE.fullmatch(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not LOW-HIGH (two port numbers)")
    low, high = int(match.group(1)), int(match.group(2))
    if low > high or high > 65535:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: LOW must be at most HIGH <= 65535")
    return low, high


def add_sagemaker_arguments(g: argparse._ArgumentGroup) -> None:
    """The SageMaker flags, in the tritonserver group of `thaw serve --help`."""
    g.add_argument("--allow-sagemaker", type=triton_bool, default=False, metavar="BOOL",
                   help="serve SageMaker's /ping and /invocations on their own port (default "
                   "false; the model: SAGEMAKER_TRITON_DEFAULT_MODEL_NAME), and its multi-model "
                   "endpoint /models (with --model-control-mode=explicit)")  # fmt: skip
    g.add_argument("--sagemaker-port", type=int, default=8080, metavar="PORT",
                   help="the SageMaker port (default 8080)")  # fmt: skip
    g.add_argument("--sagemaker-safe-port-range", type=port_range, default=None,
                   metavar="LOW-HIGH", help="every other port this server listens on must be "
                   "in this range, else the start is refused (SageMaker reserves the rest)",
    )  # fmt: skip


def apply_sagemaker_environment(args: argparse.Namespace, environ: Mapping[str, str]) -> None:
    """The default model and the ping mode from the environment; ValueError names a ping
    mode that is neither `ready` nor `live` (read only with `--allow-sagemaker`)."""
    args.sagemaker_model = environ.get("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME") or DEFAULT_MODEL
    mode = environ.get("SAGEMAKER_TRITON_PING_MODE") or "ready"
    if mode not in PING_MODES and args.allow_sagemaker:
        raise ValueError(f"SAGEMAKER_TRITON_PING_MODE = {mode[:40]!r}, must be one of "
                         f"{', '.join(PING_MODES)}")  # fmt: skip
    args.sagemaker_ping_mode = mode


def sagemaker_settings(args: argparse.Namespace) -> dict[str, Any]:
    """ServeConfig's SageMaker fields from `args` (defaults where the environment was not
    applied)."""
    return {
        "allow_sagemaker": args.allow_sagemaker,
        "sagemaker_port": args.sagemaker_port,
        "sagemaker_safe_port_range": args.sagemaker_safe_port_range,
        "sagemaker_model": getattr(args, "sagemaker_model", DEFAULT_MODEL),
        "sagemaker_ping_mode": getattr(args, "sagemaker_ping_mode", "ready"),
    }
