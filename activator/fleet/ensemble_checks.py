"""Whether the repository's ensembles can run, judged as a replica judges them: a step model
missing, unavailable or (with namespacing) ambiguous from the ensemble's own namespace, a step's
required version not served, ensembles that call each other in a cycle; each reason in a
replica's words. Pure: the repository's entries in, reasons out.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol, TypeVar

from activator.errors import ConfigError
from thawwire.model_control import ambiguous
from tritonconfig import cycle_error, ensemble_cycle, ensemble_steps
from tritonconfig.schema import mc

__all__ = ["check_ensembles", "ensemble_problem"]

logger = logging.getLogger(__name__)


class ModelEntry(Protocol):
    """What the checks read of a repository entry (activator.fleet.repository.ModelEntry)."""

    @property
    def directory(self) -> Path: ...
    @property
    def config(self) -> mc.ModelConfig: ...
    @property
    def versions(self) -> tuple[str, ...]: ...
    @property
    def ensemble(self) -> bool: ...
    @property
    def steps(self) -> tuple[str, ...]: ...


Entry = TypeVar("Entry", bound=ModelEntry)


def check_ensembles(
    entries: dict[str, Entry],
    unavailable: dict[str, str],
    held_twice: dict[str, tuple[Path, ...]],
    *,
    strict: bool,
) -> None:
    """Ensembles whose steps cannot run become unavailable, with a replica's reason: a step
    model missing or unavailable, or ensembles that call each other in a cycle."""
    changed = True
    while changed:  # an ensemble of an ensemble that just became unavailable, and so on
        changed = False
        for name in [n for n, e in entries.items() if e.ensemble]:
            problem = ensemble_problem(name, entries, unavailable, held_twice)
            if problem is None:
                continue
            if strict:
                raise ConfigError(problem)
            logger.warning("model=%s unavailable: %s", name, problem)
            unavailable[name] = problem
            del entries[name]
            changed = True


def ensemble_problem(
    name: str,
    entries: Mapping[str, ModelEntry],
    unavailable: dict[str, str],
    held_twice: dict[str, tuple[Path, ...]],
) -> str | None:
    home = entries[name].directory.parent
    for dep in entries[name].steps:
        if dep in held_twice:
            if home / dep not in held_twice[dep]:  # as runtime.models.namespaces.step_key
                return f"ensemble '{name}' depends on '{dep}': " + ambiguous(
                    dep, len(held_twice[dep])
                )
            continue
        if dep in unavailable:
            return (
                f"ensemble '{name}' depends on '{dep}' which has no loaded version. Model "
                f"'{dep}' loading failed with error: {unavailable[dep]}"
            )
        if dep not in entries:
            return f"ensemble '{name}' depends on '{dep}' which is not in the model repository"
    for step in ensemble_steps(entries[name].config):
        if step.model_name in held_twice:
            continue  # its version is its replica's to judge
        served = entries[step.model_name].versions
        if step.model_version > 0 and str(step.model_version) not in served:
            return (
                f"ensemble '{name}' depends on '{step.model_name}' whose required version "
                f"{step.model_version} is not loaded."
            )
    cycle = _cycle(name, entries)
    if cycle:
        return cycle_error(cycle)
    return None


def _cycle(name: str, entries: Mapping[str, ModelEntry]) -> list[str]:
    """The ensembles along a path from `name` back to itself, or []."""

    def steps_of(model: str) -> list[str]:
        entry = entries.get(model)
        return list(entry.steps) if entry is not None else []

    return ensemble_cycle(name, steps_of)
