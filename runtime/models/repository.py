"""The model repository on disk: model names, scanning, reading one model into a `ModelSpec`."""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from runtime.errors import ModelNotFound, RepositoryConflict, RepositoryError
from runtime.model_config import (
    complete_config,
    config_from_json,
    default_model_filename,
    parse_config,
    run_repository_agents,
    select_versions,
)
from runtime.models.repository_file import read_regular_file
from runtime.python.pytorch_runtime import MODEL_FILE as PYTORCH_RUNTIME_FILE
from thawwire.model_control import not_unique
from thawwire.names import is_model_name, unknown_model
from tritonconfig import DEFAULT_MAX_BATCH_SIZE, composing_models, is_ensemble
from tritonconfig import ensemble_cycle as tritonconfig_cycle
from tritonconfig.config_name import config_file
from tritonconfig.fingerprint import fingerprint
from tritonconfig.python_based import python_based_model_file, pytorch_python_runtime
from tritonconfig.schema import mc

__all__ = [
    "MAX_CONFIG_BYTES",
    "ModelMappings",
    "ModelSpec",
    "Repositories",
    "ensemble_cycle",
    "fingerprint",
    "list_models",
    "read_model",
    "select_versions",
    "stored_config",
    "validate_model_name",
]

logger = logging.getLogger(__name__)

# A config.pbtxt larger than this is refused rather than parsed (hostile repositories).
MAX_CONFIG_BYTES = 4 * 1024 * 1024


def validate_model_name(name: str) -> str:
    """Return `name` if it is a plain model name (thawwire.names); ModelNotFound otherwise."""
    if not is_model_name(name):
        raise ModelNotFound(unknown_model(name))
    return name


@dataclass(frozen=True)
class ModelSpec:
    """A model as the repository describes it: normalised, validated config and its versions."""

    name: str
    model_dir: Path
    config: mc.ModelConfig
    versions: tuple[int, ...]  # the versions the policy selects, ascending
    fingerprint: tuple[tuple[str, int, int], ...]
    # A Python-based backend's shared model.py (tritonconfig.python_based), which every
    # version runs; None: each version's own model file.
    backend_model_file: Path | None = None

    def version_dir(self, version: int) -> Path:
        return self.model_dir / str(version)

    def model_file(self, version: int) -> Path:
        if self.backend_model_file is not None:
            return self.backend_model_file
        return self.version_dir(version) / default_model_filename(self.config)


class Repositories:
    """Every model repository one server serves (tritonserver's repeatable
    `--model-repository`, and those registered at run time), as one: the model names of all,
    each model's directory in the repository that holds it. A name in two repositories is no
    model (`read_model` refuses it, as Triton makes such a model unavailable).

    `repositories / name` is the model's directory, as `Path / name` is for one repository, so
    code written for one reads the same for several. With several it looks at the disk: call it
    where blocking is allowed.

    A repository registered at run time (Triton's `RegisterModelRepository`, SageMaker's
    multi-model endpoint: `register`) may map model names to its subdirectories: a mapped
    name is that directory's model, whatever the directory is called, and the mapped
    directory is no model under its own name (Triton's model mappings). `scope(root)` is one
    repository of them, its mappings included (a namespace's repository).
    """

    def __init__(self, roots: Sequence[Path], *, _mappings: ModelMappings | None = None) -> None:
        if not roots:
            raise ValueError("Repositories needs at least one repository")
        self.roots = tuple(Path(r) for r in roots)
        self._mappings = _mappings if _mappings is not None else ModelMappings()

    def register(self, root: Path, mapping: Mapping[str, str]) -> None:
        """Serve `root` too, with `mapping` (a model name -> its subdirectory of `root`):
        RepositoryConflict when `root` is served already or a name is mapped already."""
        if root in self.roots:
            raise RepositoryConflict(f"model repository '{root}' has already been registered")
        self._mappings.add(root, mapping)
        self.roots = (*self.roots, root)

    def unregister(self, root: Path) -> None:
        """Serve `root` no more, nor the names it mapped; RepositoryError when it is not served."""
        if root not in self.roots:
            raise RepositoryError(f"failed to unregister '{root}', repository not found")
        if self.roots == (root,):
            raise RepositoryError(f"failed to unregister '{root}': it is the only repository")
        self.roots = tuple(r for r in self.roots if r != root)
        self._mappings.remove(root)

    def scope(self, root: Path) -> Repositories:
        """`root` alone, with the names mapped to its subdirectories."""
        return Repositories((root,), _mappings=self._mappings)

    def is_mapped(self, name: str) -> bool:
        """Whether `name` is a mapped model (its directory may be called otherwise)."""
        return self._mappings.path(name) is not None

    def holders(self, name: str) -> list[Path]:
        """The repositories that have model `name`: the one it is mapped in, else those with
        a directory `name` that is not mapped to another name."""
        mapped = self._mappings.path(name)
        if mapped is not None:
            root = mapped.parent
            return [root] if root in self.roots and mapped.is_dir() else []
        mappings = self._mappings
        return [root for root in self.roots
                if (root / name).is_dir() and not mappings.is_mapped_dir(root / name)]  # fmt: skip

    def names_in(self, root: Path) -> list[str]:
        """The model names of one repository (`list_models`), mapped directories by their
        mapped names."""
        renamed = self._mappings.names_in(root)
        if not renamed:
            return list_models(root)
        return sorted(renamed.get(name, name) for name in list_models(root, mapped=renamed))

    def __truediv__(self, name: str) -> Path:
        mapped = self._mappings.path(name)
        if mapped is not None and mapped.parent in self.roots:
            return mapped
        if len(self.roots) == 1:
            return self.roots[0] / name
        found = self.holders(name)
        return (found[0] if found else self.roots[0]) / name

    def __str__(self) -> str:
        return ", ".join(str(root) for root in self.roots)


class ModelMappings:
    """The model names registered repositories map to their subdirectories (`Repositories`).
    Changed on the event loop and read by repository scans in threads: each change replaces
    the dict, so a reader holds a whole one."""

    def __init__(self) -> None:
        self._paths: dict[str, Path] = {}  # a name -> its directory (a root's subdirectory)

    def add(self, root: Path, mapping: Mapping[str, str]) -> None:
        for name in mapping:
            if name in self._paths:
                raise RepositoryConflict(
                    f"failed to register '{name}', there is a conflicting mapping for '{name}'"
                )
        self._paths = {**self._paths, **{name: root / subdir for name, subdir in mapping.items()}}

    def remove(self, root: Path) -> None:
        self._paths = {name: path for name, path in self._paths.items() if path.parent != root}

    def path(self, name: str) -> Path | None:
        return self._paths.get(name) if self._paths else None

    def is_mapped_dir(self, path: Path) -> bool:
        return bool(self._paths) and path in self._paths.values()

    def names_in(self, root: Path) -> dict[str, str]:
        """`root`'s mapped subdirectories and their names."""
        return {path.name: name for name, path in self._paths.items() if path.parent == root}


def list_models(repo: Path | Repositories, *, mapped: Collection[str] = ()) -> list[str]:
    """Model directory names in `repo` (hidden entries and non-names are skipped, but not the
    `mapped` subdirectories, which a mapping names); of several repositories, every name any
    of them has, once (`Repositories.names_in`)."""
    if isinstance(repo, Repositories):
        return sorted({name for root in repo.roots for name in repo.names_in(root)})
    try:
        entries = sorted(os.scandir(repo), key=lambda e: e.name)
    except OSError as exc:
        raise RepositoryError(f"cannot read model repository {repo}: {exc}") from exc
    names = []
    for entry in entries:
        if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=True):
            continue
        if is_model_name(entry.name) or entry.name in mapped:
            names.append(entry.name)
        else:
            logger.warning("skipping repository entry %r: not a valid model name", entry.name)
    return names


def stored_config(
    repo: Path | Repositories, name: str, *, config_name: str = ""
) -> mc.ModelConfig | None:
    """The config of model `name` as stored (not auto-completed; `config_file`), None when
    there is no such model or its config cannot be read."""
    try:
        validate_model_name(name)
        path = config_file(repo / name, config_name)
        return parse_config(_read_config_text(path), str(path)) if path.is_file() else None
    except (RepositoryError, ModelNotFound):
        return None


def _read_config_text(path: Path) -> str:
    """The config's text: a regular file of at most `MAX_CONFIG_BYTES`
    (runtime.models.repository_file)."""
    try:
        return read_regular_file(path, MAX_CONFIG_BYTES).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RepositoryError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except OSError as exc:
        raise RepositoryError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def _config_present(path: Path) -> bool:
    """Whether there is a config.pbtxt to read: anything at the path but nothing (a FIFO or a
    device is refused by the read, not taken for a missing config: the model would load with
    an auto-completed one). A directory the server may not search is a RepositoryError."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        raise RepositoryError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return True


def read_model(
    repo: Path | Repositories,
    name: str,
    *,
    config_json: str | None = None,
    gpu_available: bool = False,
    auto_complete: bool = True,
    gpus: tuple[int, ...] = (0,),
    backend_directory: Path | None = None,
    config_name: str = "",
    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
) -> ModelSpec:
    """Read, normalise, auto-complete and validate one model, after its config's repository
    agents ran (tritonconfig.repository_agents: the checksum agent hashes the files it names);
    RepositoryError says what is wrong.

    `backend_directory` (tritonserver's `--backend-directory`): where a config's backend that
    Thaw does not have is looked up as a Python-based backend (`NAME/model.py`); such a model
    is served as a `backend: "python"` model running that file. `config_name`
    (tritonserver's `--model-config-name`): which config file is read (`config_file`).
    `default_max_batch_size`: what the ONNX auto-complete gives a model that can batch
    (tritonconfig.complete_config)."""
    validate_model_name(name)
    # A mapped model is named by its mapping, whatever its directory and config call it
    # (Triton sets the config's name to the mapped one).
    mapped = isinstance(repo, Repositories) and repo.is_mapped(name)
    if isinstance(repo, Repositories) and len(holders := repo.holders(name)) > 1:
        roots = [str(root) for root in repo.roots]
        raise RepositoryError(not_unique(name, [str(root) for root in holders], roots))
    model_dir = repo / name
    if not model_dir.is_dir():
        raise ModelNotFound(f"model '{name}' is not in the model repository")
    config_path = config_file(model_dir, config_name)
    source = str(config_path)
    if config_json is not None:
        source = f"config override for '{name}'"
        config = config_from_json(config_json, source)
    elif _config_present(config_path):
        config = parse_config(_read_config_text(config_path), source)
    else:
        config = mc.ModelConfig()
    # Before the config is completed, as Triton runs them at its poll: the checksum agent.
    run_repository_agents(config, model_dir)
    # Triton judges the config (in messages naming the model as the config does) before it
    # compares the name with the directory's.
    declared = "" if mapped else config.name
    config.name = declared or name
    backend_model_file = python_based_model_file(config.backend, backend_directory)
    if backend_model_file is None and pytorch_python_runtime(config):
        backend_model_file = PYTORCH_RUNTIME_FILE
    if backend_model_file is not None:
        logger.info("model=%s backend '%s' is Python-based: %s", name, config.backend,
                    backend_model_file)  # fmt: skip
        config.backend = "python"
    versions = complete_config(
        config,
        model_dir,
        source,
        gpu_available=gpu_available,
        require_model_files=backend_model_file is None,
        auto_complete=auto_complete,
        gpus=gpus,
        default_max_batch_size=default_max_batch_size,
    )
    if declared and declared != name:
        raise RepositoryError(f"{source}: name '{declared}' does not match directory '{name}'")
    return ModelSpec(
        name=name,
        model_dir=model_dir,
        config=config,
        versions=tuple(versions),
        fingerprint=fingerprint(model_dir),
        backend_model_file=backend_model_file,
    )


def ensemble_cycle(repo: Path | Repositories, name: str, *, config_name: str = "") -> list[str]:
    """The names along a cycle of ensembles that reach `name` again, or [] (reads only the
    ensembles' own configs, `config_file`; a config that cannot be read ends its path)."""

    def steps_of(model: str) -> list[str]:
        path = config_file(repo / model, config_name)
        try:
            config = parse_config(_read_config_text(path), str(path))
        except RepositoryError:  # missing, unreadable, not a file, too big: ends the path
            return []
        return composing_models(config) if is_ensemble(config) else []

    return tritonconfig_cycle(name, steps_of)
