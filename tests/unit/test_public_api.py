"""Each product package's `__init__` is its curated face: what it is, its modules, its exports.

For every package and subpackage of Thaw's product packages:

- its docstring lists each of its modules and subpackages, one indented line each
  (`    name  what it is`, a subpackage as `name/`), and names nothing that is not there;
- it has `__all__`, and every name in it resolves (the lazy re-exports, PEP 562, included).

And the packages a Python model's stub process imports stay light: the stub runs under the
model's own interpreter (`EXECUTION_ENV_PATH`), which may hold only numpy.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("activator", "runtime", "snapshotter", "thaw", "thawserver", "thawwire", "tritonconfig")

# One line of a package docstring's listing: four spaces, a module name (`name/` for a
# subpackage), then two spaces and its description (or the end of the line).
_LISTED = re.compile(r"^    ([a-z_][a-z0-9_]*/?)(?:  |$)")


def _packages() -> list[str]:
    found = []
    for top in PACKAGES:
        for init in sorted((ROOT / top).rglob("__init__.py")):
            if "__pycache__" in init.parts:
                continue
            found.append(".".join(init.parent.relative_to(ROOT).parts))
    return found


def _folder(package: str) -> Path:
    return ROOT.joinpath(*package.split("."))


def _docstring(package: str) -> str:
    tree = ast.parse((_folder(package) / "__init__.py").read_text(encoding="utf-8"))
    return ast.get_docstring(tree, clean=False) or ""


def _on_disk(package: str) -> set[str]:
    """The package's modules (`name`) and subpackages (`name/`)."""
    entries = set()
    for child in _folder(package).iterdir():
        if child.suffix == ".py" and child.name != "__init__.py":
            entries.add(child.stem)
        elif child.is_dir() and (child / "__init__.py").is_file():
            entries.add(f"{child.name}/")
    return entries


def _listed(package: str) -> list[str]:
    return [m.group(1) for line in _docstring(package).splitlines() if (m := _LISTED.match(line))]


ALL_PACKAGES = _packages()


def test_every_product_package_is_found() -> None:
    """The discovery the tests below run on sees the subpackages (not just the tops)."""
    for expected in ("runtime.python.stub", "activator.scaler.kubernetes", "thawserver"):
        assert expected in ALL_PACKAGES


@pytest.mark.parametrize("package", ALL_PACKAGES)
def test_docstring_lists_every_module_and_nothing_else(package: str) -> None:
    docstring = _docstring(package)
    assert docstring.strip(), f"{package}/__init__.py has no docstring"
    listed = _listed(package)
    on_disk = _on_disk(package)
    missing = sorted(on_disk - set(listed))
    gone = sorted(set(listed) - on_disk)
    twice = sorted({name for name in listed if listed.count(name) > 1})
    assert not (missing or gone or twice), (
        f"{package}/__init__.py's docstring lists its modules one a line (`    name  what it "
        "is`, a subpackage as `name/`):\n"
        f"  not listed: {missing}\n  listed but not there: {gone}\n  listed twice: {twice}"
    )


@pytest.mark.parametrize("package", ALL_PACKAGES)
def test_all_exists_and_every_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    exported = module.__dict__.get("__all__")
    assert isinstance(exported, list), f"{package} has no `__all__` list"
    assert all(isinstance(name, str) for name in exported), exported
    assert len(set(exported)) == len(exported), f"{package}.__all__ names a name twice"
    unresolved = [name for name in exported if not hasattr(module, name)]
    assert not unresolved, f"{package}.__all__ names what it does not have: {unresolved}"


# What a stub process may import: the standard library, numpy, and these product modules (the
# parent packages' `__init__`s, pb_utils and its host, the stub, fast_json's stdlib fallback).
_STUB_TOPS = {"numpy", "runtime", "thawserver"}
_STUB_MODULES = {
    "runtime",
    "runtime.observe",
    "runtime.observe.custom_metrics",
    "runtime.python",
    "runtime.python.host",
    "runtime.python.pb_logging",
    "runtime.python.pb_metrics",
    "runtime.python.pb_model_config",
    "runtime.python.pb_request_args",
    "runtime.python.pb_tensors",
    "runtime.python.pb_utils",
    "thawserver",
    "thawserver.fast_json",
    "thawserver.log_records",
}

_STUB_IMPORT = textwrap.dedent(
    """
    import importlib.abc, json, sys

    ALLOWED = set(sys.argv[1].split(","))

    class OnlyStdlibAndNumpy(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            top = name.partition(".")[0]
            if top in sys.stdlib_module_names or top in ALLOWED or top.startswith("_"):
                return None
            raise ImportError(f"{name} is not importable in a stub's interpreter")

    sys.meta_path.insert(0, OnlyStdlibAndNumpy())
    import runtime.python.stub.stub_main  # noqa: F401
    print(json.dumps(sorted(sys.modules)))
    """
)


def test_a_stub_process_imports_only_stdlib_numpy_and_its_own_modules() -> None:
    """`python -m runtime.python.stub.stub_main` where nothing but the standard library and
    numpy can be imported (the packages' `__init__`s must not import aiohttp, grpc, ...)."""
    done = subprocess.run(
        [sys.executable, "-c", _STUB_IMPORT, ",".join(sorted(_STUB_TOPS))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    imported = set(ast.literal_eval(done.stdout.strip().splitlines()[-1]))
    product = {
        name
        for name in imported
        if name.partition(".")[0] in PACKAGES and not name.startswith("runtime.python.stub")
    }
    assert product <= _STUB_MODULES, sorted(product - _STUB_MODULES)


@pytest.mark.parametrize(
    "package", ["runtime", "runtime.python", "runtime.python.stub", "runtime.observe", "thawserver"]
)
def test_the_stubs_parent_packages_import_nothing(package: str) -> None:
    """Importing one of these packages alone imports none of its modules."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import json, sys, {package}; print(json.dumps(sorted(sys.modules)))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    imported = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    parents = {".".join(package.split(".")[: i + 1]) for i in range(package.count(".") + 1)}
    product = {name for name in imported if name.partition(".")[0] in PACKAGES} - parents
    assert not product, f"importing {package} imported {sorted(product)}"
