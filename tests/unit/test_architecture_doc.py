"""docs/ARCHITECTURE.md names every package and subpackage of Thaw, and nothing that is gone.

The "Packages" section holds one fenced block: a line per package (`runtime/`) and, indented two
spaces a level, one per subpackage (`  python/`, `    stub/`), its description beside it; a
`(root)` line sums up a package's root modules. The modules themselves are listed in each
package's `__init__.py` (tests/unit/test_public_api.py). Elsewhere the doc may name modules, by
path (`runtime/codecs/rest.py`) or dotted (`runtime.models.service.ModelService`): each must
exist. These tests read the doc and the tree on disk (not git's index, so a new package fails
here before it is committed), relative to this file, so they import no product package.
"""

from __future__ import annotations

import re
import tomllib
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
PACKAGES = tuple(
    tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"][
        "root_packages"
    ]
)
PACKAGES_HEADING = "## Packages"

# `.py` names the doc may use that are no module of the tree: the Python model file a Triton
# repository holds.
NOT_MODULES = frozenset({"model.py"})

_ENTRY = re.compile(r"^((?:  )*)(\w+)/(?:\s|$)")
# A `.py` path anywhere in the doc: not part of a longer path or a glob (`kube_*.py`).
_PY_PATH = re.compile(r"(?<![\w/.*-])(\w[\w/]*\.py)\b")
_TOPS = "|".join(PACKAGES)
# A product package's folder by path (`activator/scaler/kubernetes/`), or a dotted name
# (`runtime.models.manager.ModelManager`) of at least two parts.
_DIR_PATH = re.compile(rf"(?<![\w/.-])((?:{_TOPS})(?:/\w+)+)/(?![\w.])")
_DOTTED = re.compile(rf"(?<![\w/.-])((?:{_TOPS})(?:\.\w+)+)")


@cache
def _doc() -> str:
    return DOC.read_text(encoding="utf-8")


@cache
def _listed() -> tuple[str, ...]:
    """The dotted names of the packages the Packages block lists, in its order."""
    text = _doc()
    start = text.find(f"\n{PACKAGES_HEADING}\n")
    assert start >= 0, f"{DOC}: no {PACKAGES_HEADING!r} section"
    opening = text.find("\n```", start)
    closing = text.find("\n```", opening + 4)
    assert 0 <= opening < closing, f"{DOC}: the {PACKAGES_HEADING!r} section has no fenced block"
    names: list[str] = []
    parents: list[str] = []
    for line in text[opening + 4 : closing].splitlines()[1:]:
        entry = _ENTRY.match(line)
        if not entry:
            continue
        depth = len(entry.group(1)) // 2
        assert depth <= len(parents), f"{DOC}: {line.strip()!r} is indented below no package"
        parents[depth:] = [entry.group(2)]
        names.append(".".join(parents))
    return tuple(names)


def _on_disk() -> list[str]:
    """Every package and subpackage of the product packages (a folder with `__init__.py`)."""
    return sorted(
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in PACKAGES
        for init in (ROOT / top).rglob("__init__.py")
        if "__pycache__" not in init.parts
    )


@cache
def _tree_py_files() -> tuple[str, ...]:
    """Every `.py` file under the repository root, as a posix path (hidden dirs skipped)."""
    found: list[str] = []
    pending = [ROOT]
    while pending:
        folder = pending.pop()
        for child in folder.iterdir():
            if child.name.startswith(".") or child.name == "__pycache__":
                continue
            if child.is_dir():
                pending.append(child)
            elif child.suffix == ".py":
                found.append(child.relative_to(ROOT).as_posix())
    return tuple(found)


def test_every_package_and_subpackage_is_listed() -> None:
    listed = set(_listed())
    missing = [name for name in _on_disk() if name not in listed]
    assert not missing, (
        f"{DOC.relative_to(ROOT)}'s {PACKAGES_HEADING!r} block does not name these packages "
        "(add a line under the parent's, indented two spaces more, `name/` and what it is):\n  "
        + "\n  ".join(missing)
    )


def test_every_listed_package_exists_once() -> None:
    listed = _listed()
    on_disk = set(_on_disk())
    gone = [name for name in listed if name not in on_disk]
    twice = sorted({name for name in listed if listed.count(name) > 1})
    assert not (gone or twice), (
        f"{DOC.relative_to(ROOT)}'s {PACKAGES_HEADING!r} block names packages that are not "
        f"there: {gone}; more than once: {twice}"
    )


def test_every_py_path_the_doc_names_exists() -> None:
    """A path with a package prefix (`runtime/codecs/rest.py`) must exist as written; a shorter one
    (`scaler/local/backend.py`, `direct_load.py`) must end some `.py` file of the tree."""
    files = _tree_py_files()
    tails = {
        "/".join(parts[i:])
        for parts in (path.split("/") for path in files)
        for i in range(len(parts))
    }
    gone = set()
    for name in _PY_PATH.findall(_doc()):
        if name in NOT_MODULES:
            continue
        if name.split("/", 1)[0] in PACKAGES and "/" in name:
            if not (ROOT / name).is_file():
                gone.add(name)
        elif name not in tails:
            gone.add(name)
    assert not gone, (
        f"{DOC.relative_to(ROOT)} names `.py` paths that do not exist in the tree (a module "
        "renamed or removed?):\n  " + "\n  ".join(sorted(gone))
    )


def test_every_package_folder_the_doc_names_exists() -> None:
    gone = sorted({path for path in _DIR_PATH.findall(_doc()) if not (ROOT / path).is_dir()})
    assert not gone, f"{DOC.relative_to(ROOT)} names folders that are not there: {gone}"


def _resolves(dotted: str) -> bool:
    """`a.b.c.Name.attr`: its longest prefix that is a package or module is a module (the rest
    its attributes), or the whole name is a package."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        path = ROOT.joinpath(*parts[:end])
        if path.with_suffix(".py").is_file():
            return True
        if (path / "__init__.py").is_file():
            return end == len(parts) or parts[end][:1].isupper() or parts[end].isupper()
    return False


def test_every_dotted_module_the_doc_names_exists() -> None:
    """`runtime.models.service.ModelService` passes; `runtime.grpc_handlers` (gone: it is
    `runtime.grpc.handlers`) fails. A package's export (`snapshotter.RestoredImage`) passes."""
    gone = sorted({name for name in _DOTTED.findall(_doc()) if not _resolves(name)})
    assert not gone, (
        f"{DOC.relative_to(ROOT)} names modules that are not there (moved into a subpackage?): "
        + ", ".join(gone)
    )
