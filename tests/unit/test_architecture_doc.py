"""docs/ARCHITECTURE.md lists every module of Thaw's packages, and names no module that is gone.

The "Layout: every module" section holds one fenced block: a heading line per package
(`runtime/`), then one entry per module, indented two spaces, its path relative to the package
(`backends/onnxruntime_backend.py`), its description beside it or on the lines below. These
tests read that block and the tree on disk (not git's index, so a new file fails here before it
is committed), relative to this file, so they need no import of the packages.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
PACKAGES = ("activator", "runtime", "snapshotter", "thaw", "thawwire", "tritonconfig")
LAYOUT_HEADING = "## Layout: every module"

# `.py` names the doc may use that are no module of the tree: the Python model file a Triton
# repository holds.
NOT_MODULES = frozenset({"model.py"})

_PACKAGE_HEADING = re.compile(r"^([\w.-]+)/$")
_ENTRY = re.compile(r"^  (\S+)")
# A `.py` path anywhere in the doc: not part of a longer path or a glob (`kube_*.py`).
_PY_PATH = re.compile(r"(?<![\w/.*-])(\w[\w/]*\.py)\b")


@cache
def _doc() -> str:
    return DOC.read_text(encoding="utf-8")


@cache
def _layout() -> dict[str, tuple[str, ...]]:
    """Package heading -> the entries under it, as the Layout block writes them."""
    text = _doc()
    start = text.find(LAYOUT_HEADING)
    assert start >= 0, f"{DOC}: no {LAYOUT_HEADING!r} section"
    opening = text.find("\n```", start)
    closing = text.find("\n```", opening + 4)
    assert 0 <= opening < closing, f"{DOC}: the {LAYOUT_HEADING!r} section has no fenced block"
    listed: dict[str, list[str]] = {}
    package: str | None = None
    for line in text[opening + 4 : closing].splitlines()[1:]:
        heading = _PACKAGE_HEADING.match(line)
        if heading:
            package = heading.group(1)
            listed.setdefault(package, [])
            continue
        entry = _ENTRY.match(line)
        if entry and package is not None:
            listed[package].append(entry.group(1))
    return {name: tuple(entries) for name, entries in listed.items()}


def _modules(package: str) -> list[str]:
    """Every module file of `package` on disk, relative to it (no `__init__.py`, no caches)."""
    base = ROOT / package
    return sorted(
        path.relative_to(base).as_posix()
        for path in base.rglob("*.py")
        if path.name != "__init__.py" and "__pycache__" not in path.parts
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


def test_layout_has_a_heading_for_each_package() -> None:
    layout = _layout()
    absent = [f"{name}/" for name in PACKAGES if not layout.get(name)]
    assert not absent, (
        f"{DOC.relative_to(ROOT)}: the {LAYOUT_HEADING!r} block has no entries under "
        f"{', '.join(absent)}"
    )


def test_every_module_is_listed_under_its_package() -> None:
    layout = _layout()
    missing = [
        f"{package}/{module}"
        for package in PACKAGES
        for module in _modules(package)
        if module not in layout.get(package, ())
    ]
    assert not missing, (
        f"{DOC.relative_to(ROOT)} does not list these modules in its {LAYOUT_HEADING!r} block "
        "(add an entry under the package's heading, its path relative to the package, with the "
        "one concept of the module from its docstring):\n  " + "\n  ".join(missing)
    )


def test_every_listed_entry_exists() -> None:
    layout = _layout()
    gone = [
        f"{package}/{entry}"
        for package in PACKAGES
        for entry in layout.get(package, ())
        if not (ROOT / package / entry).exists()
    ]
    assert not gone, (
        f"{DOC.relative_to(ROOT)} lists entries in its {LAYOUT_HEADING!r} block that do not "
        "exist (remove or rename them):\n  " + "\n  ".join(gone)
    )


def test_every_py_path_the_doc_names_exists() -> None:
    """A path with a package prefix (`runtime/codec.py`) must exist as written; a shorter one
    (`scaler/kube_api.py`, `direct_load.py`) must end some `.py` file of the tree."""
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
