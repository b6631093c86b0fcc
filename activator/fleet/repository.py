"""The activator's read-only view of a Triton model repository: names, configs, metadata.

It answers model metadata, config and readiness without waking a model, and supplies each
model's `thaw.*` parameters. Configs are parsed, completed and checked by `tritonconfig`, the
code a replica runs too, so the answers at zero replicas are a replica's. Not done here: a
python model's own `auto_complete_config` (it runs the model's code, which only a replica does).
Such a model is only detected, from its model.py's text (`ModelEntry.replica_completes`):
its config is asked of a replica (activator.fleet.replica_config).

Model namespacing (tritonserver's `--model-namespacing=true`, as runtime.models.namespaces on
`thaw serve`): each repository is a namespace and one name may be in several. The activator
keeps one endpoint per *name*, so it serves a name one namespace holds as any other model,
and refuses a name several hold, by name, with Triton's ambiguity (`AmbiguousModel`, 400):

    a client's name            one namespace holds it: that model, served and scaled to zero
                               several: 400 "There are N identifiers of model 'x' ..."
    an ensemble's step         run inside the ensemble's replica (`thaw serve
                               --model-namespacing`, which resolves it in the ensemble's own
                               namespace first); an ambiguous step is fine when the ensemble's
                               own namespace holds it
    a name's holders change    (poll, or a load that re-reads it) it becomes served, or
                               ambiguous, and the ensembles that step on it get new replicas
                               (activator.fleet.reload)

Such an ensemble's replica does not take direct connections: the step models it loads must
not answer a client by name (their names may be ambiguous to the platform).
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from activator.config import ScaleSettings, validated
from activator.errors import AmbiguousModel, ConfigError, ModelUnavailable, UnknownModel
from activator.fleet.ensemble_checks import check_ensembles, ensemble_problem
from thawwire.metadata import model_metadata
from thawwire.model_control import ambiguous, not_unique
from thawwire.names import is_model_name, unknown_model
from tritonconfig import (
    DEFAULT_MAX_BATCH_SIZE,
    ModelConfigError,
    complete_config,
    composing_models,
    config_from_json,
    config_to_json,
    default_model_filename,
    is_ensemble,
    parse_config,
)
from tritonconfig.backend_refusal import backend_refusal
from tritonconfig.config_name import config_file
from tritonconfig.fingerprint import Fingerprint, fingerprint
from tritonconfig.python_based import python_based_model_file, pytorch_python_runtime
from tritonconfig.schema import mc

__all__ = ["ModelEntry", "Repository", "Reread", "ambiguous_steps"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelEntry:
    """One model of the repository as the activator sees it."""

    name: str
    directory: Path
    config: mc.ModelConfig
    versions: tuple[str, ...]  # served versions, per the version policy, ascending
    settings: ScaleSettings
    # A python model whose model.py defines `auto_complete_config`: a replica completes its
    # config by running that code, so `config` (the config.pbtxt's completion) is not what it
    # serves (activator.fleet.replica_config asks a replica).
    replica_completes: bool = False
    # Derived from `config` once, at the scan: whether it is an ensemble, and the models its
    # steps run, each once, in step order (() for any other model).
    ensemble: bool = False
    steps: tuple[str, ...] = ()

    def metadata(
        self, version: str | None = None, *, config: mc.ModelConfig | None = None
    ) -> dict[str, Any]:
        """KServe v2 model metadata JSON, of `config` if given (the one a replica completed)
        else this entry's; asked for one version, it lists only that one."""
        return model_metadata(self.config if config is None else config, self.versions, version)

    def config_json(self, config: mc.ModelConfig | None = None) -> dict[str, Any]:
        """The ModelConfig (`config` if given, else this entry's) as Triton's JSON: proto
        field names, int64 fields as numbers."""
        return config_to_json(self.config if config is None else config)

    @property
    def gpus_per_replica(self) -> int:
        """GPUs one replica holds: the distinct device ids of the completed config's KIND_GPU
        instance groups (completion puts a group that lists none on GPU 0); 0 on CPUs only.
        The activator completes configs as for a CPU target, so a KIND_AUTO group counts as
        CPU: name KIND_GPU for GPU-seconds to be counted (activator.observe.cost)."""
        kind_gpu = mc.ModelInstanceGroup.KIND_GPU
        return len({g for group in self.config.instance_group if group.kind == kind_gpu
                    for g in (group.gpus or [0])})  # fmt: skip

    def version_dir_bytes(self) -> int:
        """Size in bytes of the newest served version's files (sizes a restore arena)."""
        if not self.versions:
            return 0
        root = self.directory / self.versions[-1]
        return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def _load_entry(
    directory: Path,
    defaults: ScaleSettings,
    backend_directory: Path | None = None,
    *,
    auto_complete: bool = True,
    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    namespacing: bool = False,
    config_json: str | None = None,
    config_name: str = "",
) -> ModelEntry:
    """One model; ConfigError when its config is unreadable or a replica would refuse it. A
    backend found in `backend_directory` is a Python-based one: served as a Python model that
    runs its model.py, as the replicas (given the same directory) serve it. `config_json`: a
    load's `config` override, read instead of the directory's config (`config_file`, by
    `--model-config-name`)."""
    name = directory.name
    path = config_file(directory, config_name)
    try:
        if config_json is not None:
            config = config_from_json(config_json, f"config override for '{name}'")
        else:
            config = _read_config(path)
        # Triton judges the config (in messages naming the model as the config does) before
        # it compares the name with the directory's, as a replica (runtime.models.repository).
        declared = config.name
        config.name = declared or name
        backend_file = python_based_model_file(config.backend, backend_directory)
        # PyTorch's Python runtime is a Python-based backend too (its file is the replicas').
        builtin = backend_file is None and pytorch_python_runtime(config)
        if backend_file is not None or builtin:
            config.backend = "python"
        # A missing model file is left to the wake-up (whose error names it), unlike a
        # replica: a file copied in later must serve, without a `load` to re-read the model.
        # As a replica on its default target (`thaw serve --target cpu`) completes it.
        versions = complete_config(
            config, directory, str(path), gpu_available=False, require_model_files=False,
            auto_complete=auto_complete, default_max_batch_size=default_max_batch_size,
        )  # fmt: skip
        if declared and declared != name:
            raise ConfigError(f"{path}: name '{declared}' does not match directory '{name}'")
        config.name = name
    except ModelConfigError as exc:
        raise ConfigError(exc.message) from exc
    refused = backend_refusal(config, name)  # the config alone says it, as the replica's load
    if refused is not None:
        raise ConfigError(refused)
    params = {k: v.string_value for k, v in config.parameters.items()}
    settings = validated(defaults, params, model=name)
    if namespacing and is_ensemble(config):
        # Its replica loads its step models too (module docstring): no client of it by name.
        settings = dataclasses.replace(settings, direct_connections=False)
    served = tuple(str(v) for v in versions)
    hooked = (
        config.backend == "python"
        and not builtin
        and bool(served)
        and defines_auto_complete(
            backend_file or directory / served[-1] / default_model_filename(config)
        )
    )
    return ModelEntry(
        name, directory, config, served, settings, replica_completes=hooked,
        ensemble=is_ensemble(config), steps=tuple(composing_models(config)),
    )  # fmt: skip


def defines_auto_complete(model_file: Path) -> bool:
    """Whether a python model file defines `TritonPythonModel.auto_complete_config`, read
    from its text, never run. A file that does not parse is read for the `def` (a replica
    refuses it, and asking one gives its error); one that cannot be read defines nothing."""
    try:
        text = model_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    try:
        tree = ast.parse(text, str(model_file))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "def auto_complete_config" in text
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "TritonPythonModel":
            if any(_names_hook(member) for member in node.body):
                return True
        elif isinstance(node, ast.Assign) and any(  # TritonPythonModel.auto_complete_config = f
            isinstance(t, ast.Attribute) and t.attr == _HOOK for t in node.targets
        ):
            return True
    return False


_HOOK = "auto_complete_config"


def _names_hook(member: ast.stmt) -> bool:
    if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return member.name == _HOOK
    if isinstance(member, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == _HOOK for t in member.targets)
    if isinstance(member, ast.AnnAssign):
        return isinstance(member.target, ast.Name) and member.target.id == _HOOK
    return False


def _read_config(path: Path) -> mc.ModelConfig:
    """The parsed config.pbtxt; without one, an empty config (auto-completed, as Triton does)."""
    if not path.is_file():
        return mc.ModelConfig()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    return parse_config(text, str(path))


@dataclass(frozen=True)
class Reread:
    """One model's directory read again (`Repository.reread`): its fingerprint (None: no
    directory of that name now) and its new entry, or why it cannot be served."""

    name: str
    fingerprint: Fingerprint | None
    entry: ModelEntry | None = None
    error: str | None = None
    # With namespacing, a name several repositories hold: their model directories (no entry).
    ambiguous: tuple[Path, ...] = ()


@dataclass(frozen=True)
class _Reading:
    """How the repository's models are read (the scan's options), kept for re-reads."""

    defaults: ScaleSettings = field(default_factory=ScaleSettings)
    backend_directory: Path | None = None
    auto_complete: bool = True
    namespacing: bool = False
    config_name: str = ""  # `--model-config-name` (tritonconfig.config_name)
    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE  # ONNX auto-complete's


class Repository:
    """Models of one or more repository directories (tritonserver's repeatable
    `--model-repository`), as one index, scanned at start-up; a model is read again by
    `reread` and its result kept by `install`, `refuse` or `remove` (activator.fleet.rescan).

    A model whose config cannot be used is *unavailable*: it is listed (index, status) with
    the reason, its routes answer 503 with that reason, and every other model is served. A
    name found in more than one repository is unavailable too, as on `thaw serve`; with
    namespacing it is *ambiguous* instead (module docstring): refused by name, a step of its
    own namespace's ensembles.
    """

    def __init__(
        self,
        root: Path | Sequence[Path],
        entries: dict[str, ModelEntry],
        unavailable: dict[str, str] | None = None,
        *,
        start_error: str | None = None,
        fingerprints: dict[str, Fingerprint] | None = None,
        reading: _Reading | None = None,
        ambiguous: dict[str, tuple[Path, ...]] | None = None,
    ) -> None:
        self.roots: tuple[Path, ...] = (root,) if isinstance(root, Path) else tuple(root)
        self._entries = entries
        self._names = tuple(sorted(entries))
        self.unavailable: dict[str, str] = dict(unavailable or {})
        # With namespacing: each name several repositories hold -> its directories there.
        self.ambiguous: dict[str, tuple[Path, ...]] = dict(ambiguous or {})
        # Each model's fingerprint when it was last read (served or unavailable). A model
        # without one (a Repository made without a scan) reads as having no files: its first
        # re-read sees a change.
        self._fingerprints: dict[str, Fingerprint] = dict(fingerprints or {})
        # Each model's versions that a later entry left out (a load's `file:`s, a new latest):
        # Triton's index keeps their rows, "unloaded" (activator.surfaces.answers.index_rows).
        self.retired_versions: dict[str, frozenset[str]] = {}
        self._reading = reading or _Reading()
        # Why the repositories could not all be read, when `scan(missing_ok=True)` went on
        # without one (tritonserver's `--exit-on-error=false`): `thaw up` then answers, neither
        # live nor ready, as a tritonserver that failed to initialize. None: all were read.
        self.start_error = start_error

    @property
    def namespacing(self) -> bool:
        """`--model-namespacing=true`: each repository a namespace (module docstring)."""
        return self._reading.namespacing

    @property
    def config_name(self) -> str:
        """`--model-config-name`: which file each model's config is read from."""
        return self._reading.config_name

    @property
    def root(self) -> Path:
        """The first repository (REPO)."""
        return self.roots[0]

    @classmethod
    def scan(
        cls,
        root: Path | Sequence[Path],
        defaults: ScaleSettings,
        *,
        strict: bool = False,
        backend_directory: Path | None = None,
        auto_complete: bool = True,
        missing_ok: bool = False,
        namespacing: bool = False,
        config_name: str = "",
        default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    ) -> Repository:
        """Read every `<root>/<model>/config.pbtxt` of each repository. An invalid model is
        recorded as unavailable, or raises ConfigError when `strict`. Invalid `thaw.*` settings
        always raise: they are the operator's mistake, refused at start-up.
        `backend_directory`: where Python-based backends are found (tritonconfig.python_based);
        `auto_complete=False`: tritonserver's `--disable-auto-complete-config`. A repository
        that is not a directory raises ConfigError, or with `missing_ok` is passed over, the
        reason kept as `start_error`. `namespacing`: `--model-namespacing=true` (a name in
        several repositories is ambiguous, not unavailable)."""
        roots = (root,) if isinstance(root, Path) else tuple(root)
        found, missing = _model_directories(roots)
        if missing is not None and not missing_ok:
            raise ConfigError(missing)
        entries: dict[str, ModelEntry] = {}
        unavailable: dict[str, str] = {}
        held_twice: dict[str, tuple[Path, ...]] = {}
        reading = _Reading(
            defaults, backend_directory, auto_complete, namespacing, config_name,
            default_max_batch_size,
        )  # fmt: skip
        fingerprints = {name: _fingerprint(dirs) for name, dirs in found.items()}
        for name, directories in sorted(found.items()):
            if namespacing and len(directories) > 1:
                held_twice[name] = tuple(directories)
                continue
            try:
                entries[name] = _read_model(name, directories, reading, roots)
            except ConfigError as exc:
                if strict or exc.message.startswith(("`thaw.", "unknown setting `thaw.")):
                    raise
                logger.warning("model=%s unavailable: %s", name, exc.message)
                unavailable[name] = exc.message
        check_ensembles(entries, unavailable, held_twice, strict=strict)
        return cls(
            roots, entries, unavailable, start_error=missing, fingerprints=fingerprints,
            reading=reading, ambiguous=held_twice,
        )  # fmt: skip

    def fingerprint_of(self, name: str) -> Fingerprint | None:
        """The model's fingerprint when it was last read; None when no such model is known."""
        known = name in self._entries or name in self.unavailable or name in self.ambiguous
        return self._fingerprints.get(name, ()) if known else None

    def fingerprints(self) -> dict[str, Fingerprint]:
        """Every known model's fingerprint when it was last read (`fingerprint_of`)."""
        return {n: f for n in (*self._entries, *self.unavailable, *self.ambiguous)
                if (f := self.fingerprint_of(n)) is not None}  # fmt: skip

    def read_fingerprints(self) -> dict[str, Fingerprint]:
        """Every model directory's fingerprint now, by name (blocking: in a thread); a name in
        several repositories gets their files together. OSError when a repository is not a
        directory now: an unmounted repository must not read as every model removed."""
        found, missing = _model_directories(self.roots)
        if missing is not None:
            raise OSError(missing)
        return {name: _fingerprint(dirs) for name, dirs in found.items()}

    def reread(self, name: str) -> Reread:
        """Read model `name`'s directory again, in every repository (blocking: file reads, in
        a thread). Its entry, or the reason it cannot be served: a replica's refusal of its
        config, a `thaw.*` setting out of range, or a name found in several repositories (an
        ensemble's steps are judged when it is installed: `ensemble_problem`)."""
        if not is_model_name(name):
            return Reread(name, None)
        directories = [root / name for root in self.roots if (root / name).is_dir()]
        if not directories:
            return Reread(name, None)
        files = _fingerprint(directories)
        if self._reading.namespacing and len(directories) > 1:
            return Reread(name, files, ambiguous=tuple(directories))
        try:
            entry = _read_model(name, directories, self._reading, self.roots)
        except ConfigError as exc:
            return Reread(name, files, error=exc.message)
        return Reread(name, files, entry)

    def files_now(self, name: str) -> Fingerprint | None:
        """Model `name`'s repository files now (blocking: in a thread); None when no
        repository has its directory."""
        if not is_model_name(name):
            return None
        found = [root / name for root in self.roots if (root / name).is_dir()]
        return _fingerprint(found) if found else None

    def without_directory(self, names: Sequence[str]) -> set[str]:
        """Those of `names` that no repository has a directory of now (blocking: in a
        thread)."""
        return {n for n in names if not any((root / n).is_dir() for root in self.roots)}

    def reread_override(self, name: str, config_json: str, directory: Path | None = None) -> Reread:
        """Model `name` read with a load's override (blocking: in a thread): its config from
        `config_json`, its files from `directory` (a load's `file:` overrides written out:
        activator.fleet.override_files) or else from its directory in the repositories. The
        fingerprint is the files' with the config's text, so that any other config or files
        read as a change."""
        if directory is None:
            if not is_model_name(name):
                return Reread(name, None)
            found = [root / name for root in self.roots if (root / name).is_dir()]
            if not found:
                return Reread(name, None)
            if len(found) > 1:
                files = _fingerprint(found)
                where = [str(d.parent) for d in found]
                error = not_unique(name, where, [str(root) for root in self.roots])
                return Reread(name, files, error=error)
            directory = found[0]
        files = (*_fingerprint([directory]), _config_mark(config_json, directory))
        try:
            entry = _load_entry(
                directory, self._reading.defaults, self._reading.backend_directory,
                auto_complete=self._reading.auto_complete, config_json=config_json,
                config_name=self._reading.config_name,
                default_max_batch_size=self._reading.default_max_batch_size,
            )  # fmt: skip
        except ConfigError as exc:
            return Reread(name, files, error=exc.message)
        return Reread(name, files, entry)

    def ensemble_problem(self, entry: ModelEntry) -> str | None:
        """Why ensemble `entry` cannot run with the models served now (a step model missing
        or unavailable, or a cycle), in a replica's words; None when it can, or it is no
        ensemble."""
        if not entry.ensemble:
            return None
        entries = {**self._entries, entry.name: entry}
        return ensemble_problem(entry.name, entries, self.unavailable, self.ambiguous)

    def stepping_on(self, name: str) -> list[str]:
        """The served ensembles with a step named `name` (their replicas load it)."""
        return [n for n, e in self._entries.items() if e.ensemble and name in e.steps]

    def hold_ambiguous(self, name: str, directories: tuple[Path, ...], files: Fingerprint) -> None:
        """`name` is held by several namespaces now (`directories`): refused by name."""
        self._entries.pop(name, None)
        self.unavailable.pop(name, None)
        self.ambiguous[name] = directories
        self._fingerprints[name] = files
        self._names = tuple(sorted(self._entries))

    def install(self, entry: ModelEntry, files: Fingerprint) -> None:
        """Serve `entry` from now on (a model added, or its new files); `files`: the
        fingerprint it was read with."""
        old = self._entries.get(entry.name)
        if old is not None:
            retired = self.retired_versions.get(entry.name, frozenset()) | set(old.versions)
            self.retired_versions[entry.name] = retired - set(entry.versions)
        self._entries[entry.name] = entry
        self.unavailable.pop(entry.name, None)
        self.ambiguous.pop(entry.name, None)
        self._fingerprints[entry.name] = files
        self._names = tuple(sorted(self._entries))

    def refuse(self, name: str, reason: str, files: Fingerprint) -> None:
        """A model not served whose files (`files`: their fingerprint) were read and refused:
        unavailable with `reason`. A served model that is refused keeps its entry (as Triton's
        failed reload leaves the old version serving): nothing changes."""
        if name not in self._entries:
            self.ambiguous.pop(name, None)
            self.unavailable[name] = reason
            self._fingerprints[name] = files

    def withhold(self, name: str, reason: str) -> None:
        """A model read and served that its start must refuse all the same, for a reason no
        single model's read sees (two models' rate-limiter resources): unavailable with
        `reason` until its files change."""
        if self._entries.pop(name, None) is not None:
            self.unavailable[name] = reason
            self._names = tuple(sorted(self._entries))

    def remove(self, name: str) -> None:
        """Forget a model whose directory is gone (once it has no replica left)."""
        self._entries.pop(name, None)
        self.unavailable.pop(name, None)
        self.ambiguous.pop(name, None)
        self._fingerprints.pop(name, None)
        self._names = tuple(sorted(self._entries))

    def names(self) -> list[str]:
        """Models that can be served, by name (unavailable ones are in `unavailable`); sorted
        once, at construction."""
        return list(self._names)

    def get(self, name: str, version: str | None = None) -> ModelEntry:
        """The model called `name` (serving `version` if given); UnknownModel otherwise,
        ModelUnavailable (503) when its config could not be used, AmbiguousModel (400) when
        several namespaces hold it."""
        entry = self._entries.get(name) if is_model_name(name) else None
        if entry is None:
            if name in self.ambiguous:
                raise AmbiguousModel(ambiguous(name, len(self.ambiguous[name])))
            if name in self.unavailable:
                reason = self.unavailable[name]
                raise ModelUnavailable(f"model '{name}' is not ready: {reason}")
            raise UnknownModel(unknown_model(name))
        if version is not None and version not in entry.versions:
            raise UnknownModel(
                f"Request for unknown model: '{name}' version {version[:50]} is not found"
            )
        return entry


def _read_model(
    name: str, directories: Sequence[Path], reading: _Reading, roots: Sequence[Path]
) -> ModelEntry:
    """Model `name`, found in `directories` (one per repository of `roots` holding it);
    ConfigError when it is in more than one or its config cannot be served."""
    if len(directories) > 1:
        where = [str(d.parent) for d in directories]
        raise ConfigError(not_unique(name, where, [str(root) for root in roots]))
    return _load_entry(
        directories[0], reading.defaults, reading.backend_directory,
        auto_complete=reading.auto_complete, namespacing=reading.namespacing,
        config_name=reading.config_name, default_max_batch_size=reading.default_max_batch_size,
    )  # fmt: skip


def ambiguous_steps(directories: Sequence[Path], config_name: str = "") -> tuple[str, ...]:
    """The step models of the ensembles among `directories` (one model name in several
    namespaces), each once; a config that cannot be read has none (its replica says why).
    Blocking: file reads."""
    steps: dict[str, None] = {}
    for directory in directories:
        try:
            config = _read_config(config_file(directory, config_name))
        except (ConfigError, ModelConfigError):
            continue
        steps.update(dict.fromkeys(composing_models(config)))
    return tuple(steps)


def _fingerprint(directories: Sequence[Path]) -> Fingerprint:
    """The fingerprint of a model found in `directories`: each one's files, under its path."""
    if len(directories) == 1:
        return fingerprint(directories[0])
    return tuple((f"{d}/{p}", t, n) for d in directories for p, t, n in fingerprint(d))


def _config_mark(config_json: str, directory: Path) -> tuple[str, int, int]:
    """A fingerprint row for a load's `config` override (and where its files were read): no
    file of a model directory has this path (a NUL in it), so a model served with an override
    never reads as unchanged against its repository's files."""
    text = f"{directory}\0{config_json}".encode("utf-8", "surrogatepass")
    digest = int.from_bytes(hashlib.sha256(text).digest()[:8], "big")
    return ("\0config-override", digest, len(text))


def _model_directories(roots: Sequence[Path]) -> tuple[dict[str, list[Path]], str | None]:
    """Each model name of the repositories -> its directories, one per repository holding it;
    and why the first repository that is not a directory was passed over (None: none was)."""
    found: dict[str, list[Path]] = {}
    missing: str | None = None
    for root in roots:
        if not root.is_dir():
            missing = missing or f"model repository {str(root)!r} is not a directory"
            continue
        for directory in sorted(root.iterdir()):
            if not directory.is_dir() or directory.name.startswith("."):
                continue
            if not is_model_name(directory.name):
                logger.warning("skipping %r: not a model name", directory.name)
                continue
            found.setdefault(directory.name, []).append(directory)
    return found, missing
