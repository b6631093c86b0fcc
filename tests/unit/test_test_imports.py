"""The test suite's own layering: tests share code only through tests/fixtures, support and fakes.

Two rules, read from every `tests/**/*.py` with `ast` (no test is imported to check them):

- nothing imports a test module (`test_*.py`) or a `conftest.py`: pytest imports those itself
  (a second import under another name runs module code twice, and a conftest's fixtures and
  constants are the directory's, not a library);
- a helper that lives beside its tests (`tests/integration/faults/process_tree.py`) is imported
  only from that directory; one that more directories need lives in `tests/fixtures/` (pytest
  fixtures and the processes they start), `tests/support/` (other helpers) or `tests/fakes/`.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
SHARED = ("tests.fixtures", "tests.support", "tests.fakes")
# Test trees: their helpers are local to their directory. tests/conformance holds the runners
# of Triton's own suites, the subject of tests/unit/conformance (imported as the unit tested).
TEST_TREES = ("tests.unit", "tests.integration", "tests.gpu", "tests.fuzz")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).parent.parts)


def _imported(source: str, path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) for each import in `source` (the text of `path`), relative ones
    resolved; `from a import b` yields both `a` and `a.b` (b may be a module)."""
    tree = ast.parse(source, filename=str(path))
    package = _package(path).split(".")
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def _is_test_or_conftest(module: str, modules: dict[str, Path]) -> bool:
    """`module` names one of the suite's test modules or conftests: `tests.<...>.test_x`, or a
    bare `test_x`/`conftest` (found on sys.path when pytest puts a test directory there)."""
    last = module.rsplit(".", 1)[-1]
    if last != "conftest" and not last.startswith("test_"):
        return False
    if module.startswith("tests."):
        return True
    return "." not in module and any(name.rsplit(".", 1)[-1] == module for name in modules)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in TESTS.rglob("*.py")}


def violations(sources: dict[Path, str], modules: dict[str, Path]) -> list[str]:
    """Each import in `sources` (path -> text) that breaks one of the two rules, as
    `path:line: why`."""
    found = []
    for path, source in sources.items():
        own = _package(path)
        for line, module in _imported(source, path):
            where = f"{path.relative_to(ROOT)}:{line}"
            if _is_test_or_conftest(module, modules):
                found.append(f"{where}: imports the test module or conftest {module}")
                continue
            if module not in modules:
                continue  # a name inside a module, or not the suite's
            helper_package = module.rsplit(".", 1)[0]
            if (
                module.startswith(TEST_TREES)
                and helper_package != own
                and modules[module].name != "__init__.py"
            ):
                found.append(
                    f"{where}: imports {module}, a helper of another test directory "
                    "(move it to tests/fixtures, tests/support or tests/fakes)"
                )
    return found


def test_no_test_module_or_conftest_is_imported_and_shared_helpers_live_in_shared_dirs() -> None:
    modules = _modules()
    sources = {path: path.read_text() for path in sorted(modules.values())}
    found = violations(sources, modules)
    assert not found, "\n".join(found)


def test_the_rules_catch_each_kind_of_import() -> None:
    """The checker itself: absolute, relative and `import` forms of each broken rule."""
    modules = {
        "tests.unit.a.test_x": TESTS / "unit/a/test_x.py",
        "tests.unit.a.conftest": TESTS / "unit/a/conftest.py",
        "tests.unit.a.helper": TESTS / "unit/a/helper.py",
        "tests.support.shared": TESTS / "support/shared.py",
    }
    elsewhere = TESTS / "unit/b/test_probe.py"
    beside = TESTS / "unit/a/test_probe.py"
    cases = [
        (elsewhere, "from tests.unit.a.test_x import SAMPLES", True),
        (beside, "from .test_x import SAMPLES", True),
        (beside, "from . import conftest", True),
        (beside, "import conftest", True),
        (beside, "from test_x import SAMPLES", True),
        (beside, "from aiohttp.test_utils import TestClient", False),
        (elsewhere, "from tests.unit.a.conftest import CHART", True),
        (elsewhere, "import tests.unit.a.test_x", True),
        (elsewhere, "from tests.unit.a.helper import make", True),
        (elsewhere, "from tests.unit.a import helper", True),
        (elsewhere, "from ..a.helper import make", True),
        (beside, "from .helper import make", False),
        (beside, "from tests.unit.a.helper import make", False),
        (elsewhere, "from tests.support.shared import make", False),
        (elsewhere, "from tests.fixtures.missing import make", False),
    ]
    for path, source, broken in cases:
        got = violations({path: source + "\n"}, modules)
        assert bool(got) is broken, (path, source, got)


def test_every_test_module_name_is_unique() -> None:
    """pytest imports test modules by their base name (the test folders are no packages): two
    `test_x.py` in different folders make collection fail ("import file mismatch")."""
    seen: dict[str, list[str]] = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert not {name: paths for name, paths in seen.items() if len(paths) > 1}
