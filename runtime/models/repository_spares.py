"""`thaw serve --python-spare-stubs auto` and `--python-spare-stub-imports auto`: how many spare
stubs to start and what they import, read from the Python models of the repositories as stored,
in the warm-up before ready (a warm pod on Kubernetes: the chart's defaults).

A pool pod is claimed by models it never loaded, but it mounts the repository they come from:
it reads every Python model's config and newest version folder (never runs them), as `thaw up`
does for its pool processes (thawserver.stub_instances, thawserver.python_imports). Read
quietly: a name or config the server refuses is said once, by the server, at its load.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from runtime.config import ServeConfig
from runtime.models.repository import stored_config
from thawserver.python_imports import spare_imports
from thawserver.stub_instances import stub_instances
from thawwire.names import is_model_name
from thawwire.runtime_parameters import PYTHON_SPARE_STUBS_MAX, SPARE_STUB_IMPORTS_MAX
from tritonconfig.errors import ModelConfigError
from tritonconfig.schema import mc
from tritonconfig.versions import available_versions

__all__ = ["spare_plan"]


@dataclass(frozen=True)
class _Stored:
    directory: Path
    config: mc.ModelConfig
    versions: tuple[str, ...]  # the version folders, ascending


def spare_plan(config: ServeConfig) -> tuple[int, tuple[str, ...]]:
    """The spares to start and the modules they import: each as the flags say, or, where they
    say `auto`, from the repositories' Python models (backend "python")."""
    models = _python_models(config) if config.spares_from_repository else []
    count = config.python_spare_stubs
    if config.python_spare_stubs_auto:
        count = min(stub_instances(m.config for m in models), PYTHON_SPARE_STUBS_MAX)
    imports = config.python_spare_stub_imports
    if config.python_spare_stub_imports_auto:
        imports = spare_imports(models, SPARE_STUB_IMPORTS_MAX)
    return count, imports


def _python_models(config: ServeConfig) -> list[_Stored]:
    models = []
    for root in config.repositories:
        for name in _names(root):
            try:
                stored = stored_config(root, name, config_name=config.model_config_name)
            except (ModelConfigError, RecursionError):  # the server says so, at its load
                continue
            if stored is not None and stored.backend == "python":
                models.append(_Stored(root / name, stored, _versions(root / name)))
    return models


def _names(root: Path) -> list[str]:
    try:
        with os.scandir(root) as entries:
            return sorted(e.name for e in entries if is_model_name(e.name) and e.is_dir())
    except OSError:
        return []


def _versions(directory: Path) -> tuple[str, ...]:
    try:
        return tuple(str(n) for n in available_versions(directory))
    except ModelConfigError:  # unreadable: the server says so, at its load
        return ()
