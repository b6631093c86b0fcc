"""The installed packages a repository's Python models import, read from their source (never
run): what `thaw up`'s spare stubs import ahead by default (`--python-spare-stub-imports`
not given), so that a model importing torch finds it imported at its cold start.

    model.py and its folder's .py files ─ imported_packages ─▶ top-level names, in order
        ─ installed ─▶ those this interpreter finds in its site-packages, less the standard
                       library, what a stub imports anyway and what the model's folders hold

Only installed distributions are imported ahead: their import has no effect beyond the process
by convention, where a module on PYTHONPATH or beside a model may do anything (and a name the
model's own folder holds must stay the model's: a spare that imported the installed one would
hand the model the wrong module). A model that sets the environment or the import path
itself is not read (what it imports may depend on what it set first); nor is one with its own
interpreter (`EXECUTION_ENV_PATH`), which never takes a spare. Bounded: at most
`_FILES_PER_MODEL` files of at most `_FILE_BYTES` each per model. A Python-based backend's own
model.py (in `--backend-directory`) is not read: only the model's version folder.
"""

from __future__ import annotations

import ast
import importlib.util
import site
import sys
import sysconfig
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol

from tritonconfig.schema import mc

__all__ = ["changes_its_setup", "imported_packages", "installed", "spare_imports"]

_FILES_PER_MODEL = 64
_FILE_BYTES = 1 << 20
# What every stub imports before its model (runtime.python.stub): nothing to gain ahead.
_STUB_IMPORTS = frozenset({"numpy", "triton_python_backend_utils", "orjson"})


class PythonModel(Protocol):
    """What is read of a model (activator.fleet.repository.ModelEntry)."""

    @property
    def directory(self) -> Path: ...
    @property
    def config(self) -> mc.ModelConfig: ...
    @property
    def versions(self) -> tuple[str, ...]: ...


def spare_imports(models: Iterable[PythonModel], limit: int) -> tuple[str, ...]:
    """The installed packages the Python models (backend "python", Python-based ones
    included) import, first seen first, at most `limit`."""
    found: list[str] = []
    for model in models:
        if model.config.backend != "python" or not model.versions:
            continue
        if "EXECUTION_ENV_PATH" in model.config.parameters:
            continue
        folder = model.directory / model.versions[-1]
        sources = [_read(p) for p in _sources(folder, model.config.default_model_filename)]
        if any(changes_its_setup(source) for source in sources):
            continue
        names = [name for source in sources for name in imported_packages(source)]
        shadows = _names_in(folder) | _names_in(model.directory)
        found += [n for n in installed(names, shadows) if n not in found]
    return tuple(found[:limit])


def imported_packages(source: str) -> list[str]:
    """The top-level package of each absolute import in `source`, anywhere in it (a function's
    lazy import too), first seen first; none for a file that does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        else:
            continue
        for module in modules:
            top = module.split(".", 1)[0]
            if top not in names:
                names.append(top)
    return names


def changes_its_setup(source: str) -> bool:
    """Whether `source` changes the environment (`os.environ[...] = `, `os.environ.update`,
    `os.putenv`, ...) or the import path (`sys.path.insert`, ...): what such a model imports
    may depend on what it set first (torch reads OMP_NUM_THREADS at its import), so a spare
    must not import it before the model runs. A file that does not parse changes nothing."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            if any(_is_setup(t.value if isinstance(t, ast.Subscript) else t) for t in targets):
                return True
        elif isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id
            if name in ("putenv", "unsetenv"):
                return True
            if isinstance(func, ast.Attribute) and name in _CHANGES and _is_setup(func.value):
                return True
    return False


_CHANGES = frozenset(
    {"update", "setdefault", "pop", "popitem", "clear", "insert", "append", "extend", "remove",
     "__setitem__", "__delitem__"}
)  # fmt: skip


def _is_setup(node: ast.expr) -> bool:
    """`os.environ` / `environ`, or `sys.path`."""
    if isinstance(node, ast.Name):
        return node.id == "environ"
    if isinstance(node, ast.Attribute):
        return node.attr == "environ" or (
            node.attr == "path" and isinstance(node.value, ast.Name) and node.value.id == "sys"
        )
    return False


def installed(names: Sequence[str], shadows: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """Those of `names` this interpreter imports from its site-packages: not the standard
    library, not what a stub imports anyway, not one of `shadows` (the model's own)."""
    roots = _site_dirs()
    out: list[str] = []
    for name in names:
        if name in sys.stdlib_module_names or name in _STUB_IMPORTS or name in shadows:
            continue
        if name.startswith("_") or not name.isidentifier():
            continue
        try:
            spec = importlib.util.find_spec(name)  # a top-level name: finds, runs nothing
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        places = [spec.origin] if spec.origin and spec.has_location else []
        places += list(spec.submodule_search_locations or [])
        if places and all(_under(Path(p), roots) for p in places):
            out.append(name)
    return out


def _sources(folder: Path, model_file: str) -> list[Path]:
    """The version folder's .py files, its model file (model.py unless named) first."""
    model_file = model_file or "model.py"
    try:
        files = sorted(p for p in folder.rglob("*.py") if p.is_file())
    except OSError:
        return []
    files.sort(key=lambda p: p != folder / model_file)  # stable: the rest keep their order
    return files[:_FILES_PER_MODEL]


def _read(path: Path) -> str:
    try:
        with path.open("rb") as f:
            return f.read(_FILE_BYTES + 1)[:_FILE_BYTES].decode("utf-8", "replace")
    except OSError:
        return ""


def _names_in(folder: Path) -> set[str]:
    """Module names a folder's own files and folders would give (`helpers.py`: helpers)."""
    try:
        return {p.stem if p.suffix == ".py" else p.name for p in folder.iterdir()}
    except OSError:
        return set()


def _site_dirs() -> list[Path]:
    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    dirs += [sysconfig.get_paths()[key] for key in ("purelib", "platlib")]
    return [Path(d).resolve() for d in dirs if d]


def _under(path: Path, roots: Iterable[Path]) -> bool:
    try:
        resolved = path.resolve()
    except OSError:
        return False
    return any(resolved.is_relative_to(root) for root in roots)
