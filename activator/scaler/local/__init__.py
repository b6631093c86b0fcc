"""The local scaler backend (`--scaler local`): replicas as `thaw serve` processes, a warm pool.

    backend          the ScalerBackend that runs each replica as a local process
    replica_process  one local `thaw serve`: spawn or adopt, wait ready, load, stop
    replica_log      a replica's standard-error lines as records of thaw up's log (pure)
    pipe_lines       a child's pipe read line by line for its life, an overlong line cut
    warm_pool        the pool of idle `thaw serve` processes, sized to demand
    shared_hosts     processes shared by `thaw.placement` shared models: place, evict, release
    pool_policy      how many idle processes to keep: pure, clock-injected
    process_source   where pool processes come from: forked or spawned
    fork_server      the activator's end of the fork server
    host_tier        the shared host-memory tier's directory (tmpfs)
    process_memory   a local process's proportional set size, from /proc

Exports `LocalBackend`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from activator.scaler.local.backend import LocalBackend

__all__ = ["LocalBackend"]

# Each export and the module that defines it, imported on first use (PEP 562), so that importing
# one module of this package does not import the others.
_EXPORTS = {
    "LocalBackend": "activator.scaler.local.backend",
}


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
