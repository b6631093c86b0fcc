"""tests/import_contracts.py: the import-linter contract that keeps `aiohttp.web_protocol`
inside thawserver.aiohttp_compat finds every spelling of such an import, and only those; the
one that keeps a stub process to its allowed imports finds what it reaches through others."""

from __future__ import annotations

import grimp
import pytest

from tests.import_contracts import (
    AllowedImportsContract,
    ForbiddenSubmodulesContract,
    imported_names,
)

FORBIDDEN = "aiohttp.web_protocol"


@pytest.mark.parametrize(
    ("line", "names"),
    [
        ("import aiohttp", {"aiohttp"}),
        ("import aiohttp.web_protocol as wp", {"aiohttp.web_protocol"}),
        ("import os, aiohttp.web_protocol", {"os", "aiohttp.web_protocol"}),
        ("from aiohttp import web", {"aiohttp", "aiohttp.web"}),
        ("from aiohttp import web_protocol", {"aiohttp", "aiohttp.web_protocol"}),
        ("from aiohttp import (web, web_protocol as p)", {"aiohttp", "aiohttp.web",
                                                          "aiohttp.web_protocol"}),
        ("from aiohttp import (", {"aiohttp"}),
        ("from aiohttp.web_protocol import RequestHandler", {"aiohttp.web_protocol",
                                                              "aiohttp.web_protocol.RequestHandler"}),
    ],
)  # fmt: skip
def test_import_lines_name_their_modules(line: str, names: set[str]) -> None:
    assert imported_names(line) == names


def _graph(lines: dict[str, str]) -> grimp.ImportGraph:
    graph = grimp.ImportGraph()
    graph.add_module("aiohttp", is_squashed=True)
    for importer, line in lines.items():
        graph.add_module(importer)
        graph.add_import(importer=importer, imported="aiohttp", line_number=3, line_contents=line)
    return graph


def _check(lines: dict[str, str]) -> list[str]:
    contract = ForbiddenSubmodulesContract(
        name="private aiohttp",
        session_options={"root_packages": ["pkg"], "include_external_packages": "True"},
        contract_options={"submodules": [FORBIDDEN], "allowed_importers": ["pkg.compat"]},
    )
    check = contract.check(_graph(lines), verbose=False)
    found = [v.importer for v in check.metadata["violations"]]
    assert check.kept == (not found)
    return found


def test_only_the_allowed_module_may_import_the_private_module() -> None:
    found = _check(
        {
            "pkg.compat": "from aiohttp.web_protocol import RequestHandler",
            "pkg.a": "from aiohttp.web_protocol import RequestPayloadError",
            "pkg.b": "from aiohttp import web_protocol",
            "pkg.c": "import aiohttp.web_protocol",
            "pkg.d": "from aiohttp import web",
            "pkg.e": "from aiohttp.web_protocols_lookalike import x",
        }
    )
    assert found == ["pkg.a", "pkg.b", "pkg.c"]


def test_a_graph_without_such_imports_keeps_the_contract() -> None:
    assert _check({"pkg.d": "from aiohttp import web", "pkg.compat": "import aiohttp"}) == []


def _allowed_check(imports: dict[str, set[str]]) -> list[tuple[str, str, tuple[str, ...]]]:
    graph = grimp.ImportGraph()
    for module in ("os", "numpy", "aiohttp"):
        graph.add_module(module, is_squashed=True)
    for importer, imported in imports.items():
        graph.add_module(importer)
        for name in imported:
            if name not in graph.modules:
                graph.add_module(name)
            graph.add_import(importer=importer, imported=name)
    contract = AllowedImportsContract(
        name="stub",
        session_options={"root_packages": ["pkg"], "include_external_packages": "True"},
        contract_options={"source_modules": ["pkg.stub"], "allowed_modules": ["pkg.ok", "numpy"]},
    )
    check = contract.check(graph, verbose=False)
    found = [(v.importer, v.imported, v.chain) for v in check.metadata["violations"]]
    assert check.kept == (not found)
    return found


def test_allowed_imports_refuses_what_an_allowed_module_reaches() -> None:
    found = _allowed_check(
        {
            "pkg.stub": {"pkg.stub.main"},
            "pkg.stub.main": {"os", "numpy", "pkg.ok"},
            "pkg.ok": {"pkg.heavy"},
            "pkg.heavy": {"aiohttp"},
        }
    )
    assert found == [
        ("pkg.stub", "aiohttp", ("pkg.stub", "pkg.stub.main", "pkg.ok", "pkg.heavy", "aiohttp")),
        ("pkg.stub", "pkg.heavy", ("pkg.stub", "pkg.stub.main", "pkg.ok", "pkg.heavy")),
    ]


def test_allowed_imports_keeps_stdlib_numpy_and_the_allowed() -> None:
    imports = {"pkg.stub": {"pkg.stub.main"}, "pkg.stub.main": {"os", "numpy", "pkg.ok"}}
    assert _allowed_check({**imports, "pkg.ok": {"os"}}) == []
