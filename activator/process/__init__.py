"""The activator's processes and commands: `thaw up`, `thaw status`, `thaw prefetch`.

    cli             `thaw up REPO`: flags -> ActivatorConfig, the scaler chosen
    up_flags        `thaw up`'s flags on its parser, in `--help` order
    body_limit_cli  the body caps: the clients' and the platform's own calls' (with its token)
    flag_checks     `thaw up`'s flag checks: a bad value or combination refused, by flag
    kube_cli        the `--scaler kubernetes` flags and the KubernetesConfig from them
    local_cli       the LocalConfig of the `--scaler local` (default) flags
    repository_cli  tritonserver's repository and readiness flags, parsed as thaw serve's
    shared_cli      the shared-placement flags and the SharedSettings from them
    serving         bind the listeners, start app, front door and scaler, drain on SIGTERM
    status_cli      `thaw status`: a table of every model behind a `thaw up`
    prefetch_cli    `thaw prefetch`: keep hot models' images in a node's cache
    prefetch        prefetch hot models' images into a node-local cache

Exports `serve` (run a `thaw up` from its config).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from activator.process.serving import serve

__all__ = ["serve"]

# Each export and the module that defines it, imported on first use (PEP 562), so that importing
# one module of this package does not import the others.
_EXPORTS = {
    "serve": "activator.process.serving",
}


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
