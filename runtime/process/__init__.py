"""The `thaw serve` process: its command line, its listeners, its fork server.

    cli              `thaw serve REPO`: flags -> ServeConfig -> models + surfaces -> a process
    serve_flags      `thaw serve`'s flags on its parser, in `--help` order
    triton_flags     tritonserver's flags: applied, accepted without effect, or refused by name
    startup_models   tritonserver's refusals of `--load-model`, word for word
    vertex_ai_flags  tritonserver's Vertex AI flags and Vertex AI's `AIP_*` environment
    sagemaker_flags  tritonserver's SageMaker flags and SageMaker's `SAGEMAKER_*` environment
    server           bind the listeners, announce them, drain on SIGTERM
    native_front     `--front native`: the native HTTP front (native/front) before the application
    front_control    the front's control socket: stub relays, hot versions, its statistics
    hot_models       which versions the front answers itself, kept in step with the loads
    cloud_ports      the SageMaker and Vertex AI ports beside the v2 HTTP port
    zygote           the fork server: a process with the frameworks imported forks `thaw serve`s
    cuda_warmup      a CUDA-ready warm process: contexts, memory pools, pinned staging

Exports `main` (`thaw serve ARGS`), `build_config` (flags -> ServeConfig) and `serve_app`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.process.cli import build_config, main
    from runtime.process.server import serve_app

__all__ = ["build_config", "main", "serve_app"]

# Each export and the module that defines it, imported on first use (PEP 562), so that importing
# one module of this package does not import the others.
_EXPORTS = {
    "build_config": "runtime.process.cli",
    "main": "runtime.process.cli",
    "serve_app": "runtime.process.server",
}


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
