"""tritonserver's Vertex AI flags for `thaw serve`, and the `AIP_*` environment Vertex AI gives
a prediction container, read as tritonserver 2.51 reads it (src/command_line_parser.cc).

    add_vertex_ai_arguments(group)          --allow-vertex-ai, --vertex-ai-port,
                                            --vertex-ai-default-model
    apply_vertex_ai_environment(args, env)  the defaults the environment sets, on `args`
    vertex_ai_settings(args)                ServeConfig's Vertex AI fields

Vertex AI runs a container with `AIP_MODE=PREDICTION`: then the Vertex AI port is on and the
v2 HTTP and gRPC ports off unless a flag says otherwise, and the Vertex AI port binds 0.0.0.0
(Vertex AI's health checks come from outside the container). `AIP_HTTP_PORT` is the port
(default 8080), `AIP_PREDICT_ROUTE` / `AIP_HEALTH_ROUTE` the routes (required), and
`AIP_STORAGE_URI` the model repository when none is given.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from thawserver.bool_flag import triton_bool

__all__ = ["add_vertex_ai_arguments", "apply_vertex_ai_environment", "vertex_ai_settings"]

_PREDICTION = "PREDICTION"
_DEFAULT_PORT = 8080


def add_vertex_ai_arguments(g: argparse._ArgumentGroup) -> None:
    """The Vertex AI flags, in the tritonserver group of `thaw serve --help`."""
    g.add_argument("--allow-vertex-ai", type=triton_bool, default=None, metavar="BOOL",
                   help="serve Vertex AI's prediction and health routes on their own port "
                   "(default: true when AIP_MODE=PREDICTION, which also turns the HTTP and "
                   "gRPC ports off unless --allow-http / --allow-grpc say otherwise)")  # fmt: skip
    g.add_argument("--vertex-ai-port", type=int, default=None, metavar="PORT",
                   help="the Vertex AI port (default AIP_HTTP_PORT, else 8080)")  # fmt: skip
    g.add_argument("--vertex-ai-default-model", default="", metavar="MODEL",
                   help="the model a prediction without X-Vertex-Ai-Triton-Redirect is for "
                   "(default: the repository's one model)")  # fmt: skip


def apply_vertex_ai_environment(args: argparse.Namespace, environ: Mapping[str, str]) -> None:
    """Fill what the flags left unset from Vertex AI's environment (module docstring);
    ValueError names an `AIP_HTTP_PORT` that is no port number."""
    prediction = environ.get("AIP_MODE", "") == _PREDICTION
    if args.allow_vertex_ai is None:
        args.allow_vertex_ai = prediction
    for flag in ("allow_http", "allow_grpc"):
        if getattr(args, flag) is None:
            setattr(args, flag, not prediction)
    if args.vertex_ai_port is None:
        port = environ.get("AIP_HTTP_PORT", "").strip()
        if port and not port.isdigit():
            raise ValueError(f"AIP_HTTP_PORT = {port[:40]!r}, must be a port number")
        args.vertex_ai_port = int(port) if port else _DEFAULT_PORT
    args.vertex_ai_host = "0.0.0.0" if prediction else None
    args.vertex_ai_predict_route = environ.get("AIP_PREDICT_ROUTE", "")
    args.vertex_ai_health_route = environ.get("AIP_HEALTH_ROUTE", "")
    storage = environ.get("AIP_STORAGE_URI", "")
    if storage and args.repository is None and not args.model_repositories:
        args.model_repositories = [storage]


def vertex_ai_settings(args: argparse.Namespace) -> dict[str, Any]:
    """ServeConfig's Vertex AI fields from `args` (off where the environment was not applied)."""
    return {
        "allow_vertex_ai": bool(args.allow_vertex_ai),
        "vertex_ai_host": getattr(args, "vertex_ai_host", None),
        "vertex_ai_port": args.vertex_ai_port if args.vertex_ai_port is not None else _DEFAULT_PORT,
        "vertex_ai_default_model": args.vertex_ai_default_model,
        "vertex_ai_predict_route": getattr(args, "vertex_ai_predict_route", ""),
        "vertex_ai_health_route": getattr(args, "vertex_ai_health_route", ""),
    }
