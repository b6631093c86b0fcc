"""The model repository on disk: model names, scanning, reading one model into a `ModelSpec`."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from runtime.errors import ModelNotFound, RepositoryError
from runtime.model_config import (
    complete_config,
    config_from_json,
    default_model_filename,
    parse_config,
    select_versions,
)
from thawwire.names import is_model_name
from tritonconfig import composing_models, is_ensemble
from tritonconfig.schema import mc

__all__ = [
    "MAX_CONFIG_BYTES",
    "ModelSpec",
    "ensemble_cycle",
    "fingerprint",
    "list_models",
    "read_model",
    "select_versions",
    "validate_model_name",
]

logger = logging.getLogger(__name__)

# A config.pbtxt larger than this is refused rather than parsed (hostile repositories).
MAX_CONFIG_BYTES = 4 * 1024 * 1024


def validate_model_name(name: str) -> str:
    """Return `name` if it is a plain model name (thawwire.names); ModelNotFound otherwise."""
    if not is_model_name(name):
        raise ModelNotFound(f"invalid model name {name!r}")
    return name


@dataclass(frozen=True)
class ModelSpec:
    """A model as the repository describes it: normalised, validated config and its versions."""

    name: str
    model_dir: Path
    config: mc.ModelConfig
    versions: tuple[int, ...]  # the versions the policy selects, ascending
    fingerprint: tuple[tuple[str, int, int], ...]

    def version_dir(self, version: int) -> Path:
        return self.model_dir / str(version)

    def model_file(self, version: int) -> Path:
        return self.version_dir(version) / default_model_filename(self.config)


def list_models(repo: Path) -> list[str]:
    """Model directory names in `repo` (hidden entries and non-names are skipped)."""
    try:
        entries = sorted(os.scandir(repo), key=lambda e: e.name)
    except OSError as exc:
        raise RepositoryError(f"cannot read model repository {repo}: {exc}") from exc
    names = []
    for entry in entries:
        if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=True):
            continue
        if is_model_name(entry.name):
            names.append(entry.name)
        else:
            logger.warning("skipping repository entry %r: not a valid model name", entry.name)
    return names


def fingerprint(model_dir: Path) -> tuple[tuple[str, int, int], ...]:
    """(relative path, mtime_ns, size) of every file under a model, for change detection."""
    rows = []
    for root, dirs, files in os.walk(model_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            path = Path(root) / name
            try:
                stat = path.stat()
            except OSError:
                continue
            rows.append((str(path.relative_to(model_dir)), stat.st_mtime_ns, stat.st_size))
    return tuple(rows)


def _read_config_text(path: Path) -> str:
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise RepositoryError(f"{path}: {size} bytes, over the {MAX_CONFIG_BYTES} byte limit")
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RepositoryError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except OSError as exc:
        raise RepositoryError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def read_model(
    repo: Path, name: str, *, config_json: str | None = None, gpu_available: bool = False
) -> ModelSpec:
    """Read, normalise, auto-complete and validate one model; RepositoryError says what is wrong."""
    validate_model_name(name)
    model_dir = repo / name
    if not model_dir.is_dir():
        raise ModelNotFound(f"model '{name}' is not in the model repository")
    config_path = model_dir / "config.pbtxt"
    source = str(config_path)
    if config_json is not None:
        source = f"config override for '{name}'"
        config = config_from_json(config_json, source)
    elif config_path.is_file():
        config = parse_config(_read_config_text(config_path), source)
    else:
        config = mc.ModelConfig()
    if config.name and config.name != name:
        raise RepositoryError(f"{source}: name '{config.name}' does not match directory '{name}'")
    config.name = name
    versions = complete_config(
        config, model_dir, source, gpu_available=gpu_available, require_model_files=True
    )
    return ModelSpec(
        name=name,
        model_dir=model_dir,
        config=config,
        versions=tuple(versions),
        fingerprint=fingerprint(model_dir),
    )


def ensemble_cycle(repo: Path, name: str) -> list[str]:
    """The names along a cycle of ensembles that reach `name` again, or [] (reads only the
    ensembles' own config.pbtxt; a config that cannot be read ends its path)."""

    def steps_of(model: str) -> list[str]:
        path = repo / model / "config.pbtxt"
        try:
            config = parse_config(path.read_text(encoding="utf-8"), str(path))
        except (OSError, UnicodeDecodeError, RepositoryError):
            return []
        return composing_models(config) if is_ensemble(config) else []

    seen: set[str] = set()

    def walk(model: str, chain: list[str]) -> list[str]:
        for dep in steps_of(model):
            if dep == name:
                return [*chain, dep]
            if dep not in seen:
                seen.add(dep)
                found = walk(dep, [*chain, dep])
                if found:
                    return found
        return []

    return walk(name, [name])
