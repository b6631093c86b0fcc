"""`thaw serve --python-spare-stub-imports auto`: what the spare stubs import ahead, read from
the Python models of the repositories as stored (thawserver.python_imports), before ready.

A pool pod on Kubernetes is claimed by models it never loaded, but it mounts the repository: it
reads every Python model's config and newest version folder (never runs them), as `thaw up`
does for its pool processes. Read quietly: a name or config the server refuses is said once,
by the server.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from runtime.models.repository import stored_config
from thawserver.python_imports import spare_imports
from thawwire.names import is_model_name
from thawwire.runtime_parameters import SPARE_STUB_IMPORTS_MAX
from tritonconfig.errors import ModelConfigError
from tritonconfig.schema import mc

__all__ = ["repository_spare_imports"]


@dataclass(frozen=True)
class _Stored:
    directory: Path
    config: mc.ModelConfig
    versions: tuple[str, ...]  # the version folders, ascending


def repository_spare_imports(roots: Sequence[Path], *, config_name: str = "") -> tuple[str, ...]:
    """The installed packages the Python models (backend "python") of `roots` import."""
    models = []
    for root in roots:
        for name in _names(root):
            try:
                config = stored_config(root, name, config_name=config_name)
            except (ModelConfigError, RecursionError):  # the server says so, at its load
                continue
            if config is not None and config.backend == "python":
                models.append(_Stored(root / name, config, _versions(root / name)))
    return spare_imports(models, SPARE_STUB_IMPORTS_MAX)


def _names(root: Path) -> list[str]:
    try:
        with os.scandir(root) as entries:
            return sorted(e.name for e in entries if is_model_name(e.name) and e.is_dir())
    except OSError:
        return []


def _versions(directory: Path) -> tuple[str, ...]:
    try:
        with os.scandir(directory) as entries:
            numbers = sorted(int(e.name) for e in entries if e.name.isdigit() and e.is_dir())
    except OSError:
        return ()
    return tuple(str(n) for n in numbers)
