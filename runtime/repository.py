"""The model repository on disk: names, scanning, version policy, one `ModelSpec`."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from runtime.errors import ModelNotFound, RepositoryError
from runtime.model_config import (
    autocomplete_from_onnx,
    config_from_json,
    default_model_filename,
    fill_defaults,
    normalize_platform,
    parse_config,
    validate_config,
)
from runtime.model_config_schema import mc

__all__ = [
    "MAX_CONFIG_BYTES",
    "ModelSpec",
    "fingerprint",
    "list_models",
    "read_model",
    "select_versions",
    "validate_model_name",
]

logger = logging.getLogger(__name__)

# A config.pbtxt larger than this is refused rather than parsed (hostile repositories).
MAX_CONFIG_BYTES = 4 * 1024 * 1024
# Matched with `fullmatch`: `$` in `re.match` would also accept a trailing newline.
_MODEL_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,254}")


def validate_model_name(name: str) -> str:
    """Return `name` if it is a plain model name; ModelNotFound if it could be a path."""
    if (
        not isinstance(name, str)
        or not _MODEL_NAME_RE.fullmatch(name)
        or name in (".", "..")
        or ".." in name
    ):
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
        if _MODEL_NAME_RE.fullmatch(entry.name) and ".." not in entry.name:
            names.append(entry.name)
        else:
            logger.warning("skipping repository entry %r: not a valid model name", entry.name)
    return names


def available_versions(model_dir: Path) -> list[int]:
    """Numeric version sub-directories of a model, ascending."""
    versions = []
    try:
        for entry in os.scandir(model_dir):
            if entry.is_dir() and entry.name.isdigit() and entry.name == str(int(entry.name)):
                versions.append(int(entry.name))
    except OSError as exc:
        raise RepositoryError(f"cannot read model directory {model_dir}: {exc}") from exc
    return sorted(versions)


def select_versions(policy: mc.ModelVersionPolicy, available: list[int], source: str) -> list[int]:
    """Apply a version policy: latest N (default 1), all, or specific versions."""
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        chosen = list(available)
    elif choice == "specific":
        wanted = sorted(set(policy.specific.versions))
        missing = [v for v in wanted if v not in available]
        if missing:
            raise RepositoryError(
                f"{source}: version_policy.specific names versions {missing} that do not exist"
            )
        chosen = wanted
    else:
        count = policy.latest.num_versions if choice == "latest" else 1
        chosen = available[-count:] if count > 0 else []
    if not chosen:
        raise RepositoryError(f"{source}: no version directory to serve (e.g. {source}/../1/)")
    return chosen


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
    available = available_versions(model_dir)
    latest_dir = model_dir / str(available[-1]) if available else None
    normalize_platform(config, latest_dir, source)
    versions = select_versions(config.version_policy, available, str(model_dir))
    for version in versions:
        model_file = model_dir / str(version) / default_model_filename(config)
        if not model_file.exists():
            raise RepositoryError(f"{source}: model file {model_file} is missing")
    if config.backend == "onnxruntime":
        autocomplete_from_onnx(
            config, model_dir / str(versions[-1]) / default_model_filename(config), source
        )
    fill_defaults(config, gpu_available=gpu_available)
    validate_config(config, source)
    return ModelSpec(
        name=name,
        model_dir=model_dir,
        config=config,
        versions=tuple(versions),
        fingerprint=fingerprint(model_dir),
    )
