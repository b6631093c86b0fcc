"""Import-linter contract types of our own (registered in pyproject's `contract_types`).

`forbidden_submodules`: import-linter's `forbidden` contract can forbid an external package
only whole (`aiohttp`), never one of its modules (`aiohttp.web_protocol`), because the graph
keeps one node per external package. The import lines are kept, though: this contract reads
them, so a module of an external package can be reserved to the modules allowed to import it.

`allowed_imports`: the opposite of `forbidden`, a list of what may be imported rather than of
what may not, so a new dependency is refused before anyone names it: every module the source
packages import, directly or through others, is the standard library's, one of theirs, or one
of `allowed_modules` (or below one).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

import grimp
from importlinter import Contract, ContractCheck, fields, output

__all__ = ["AllowedImportsContract", "ForbiddenSubmodulesContract", "imported_names"]

_FROM = re.compile(r"\s*from\s+([\w.]+)\s+import\s+\(?\s*(.*)")
_IMPORT = re.compile(r"\s*import\s+(.+)")


def imported_names(line: str) -> set[str]:
    """Every dotted module name an import line may import: `import a.b as c` -> {a.b};
    `from a.b import c, d` -> {a.b, a.b.c, a.b.d} (c and d may be modules)."""
    if match := _FROM.match(line):
        base = match.group(1)
        names = {part.split(" as ")[0].strip(" ()\\") for part in match.group(2).split(",")}
        return {base} | {f"{base}.{name}" for name in names if name.isidentifier()}
    if match := _IMPORT.match(line):
        return {part.split(" as ")[0].strip() for part in match.group(1).split(",")}
    return set()


@dataclass(frozen=True)
class _Violation:
    importer: str
    line_number: int
    line: str


class ForbiddenSubmodulesContract(Contract):
    """No module of the root packages imports `submodules` (or their descendants), except
    `allowed_importers`. Needs `include_external_packages = true`."""

    type_name = "forbidden_submodules"

    submodules = fields.ListField(subfield=fields.StringField())
    allowed_importers = fields.ListField(subfield=fields.StringField(), required=False)

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        allowed = set(self.allowed_importers or [])  # type: ignore[arg-type]
        violations = []
        for submodule in self.submodules:  # type: ignore[attr-defined]
            top = submodule.split(".")[0]
            for importer in sorted(graph.find_modules_that_directly_import(top)):
                if importer in allowed:
                    continue
                for detail in graph.get_import_details(importer=importer, imported=top):
                    line = str(detail["line_contents"])
                    if any(_within(name, submodule) for name in imported_names(line)):
                        violations.append(_Violation(importer, int(detail["line_number"]), line))
        return ContractCheck(kept=not violations, metadata={"violations": violations})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for v in check.metadata["violations"]:
            output.print_error(f"{v.importer}:{v.line_number}: {v.line}", bold=False)
        output.new_line()


def _within(name: str, module: str) -> bool:
    return name == module or name.startswith(module + ".")


@dataclass(frozen=True)
class _Unallowed:
    importer: str
    imported: str
    chain: tuple[str, ...]


class AllowedImportsContract(Contract):
    """Everything `source_modules` (and their descendants) import, transitively, is in the
    standard library, within the sources, or within `allowed_modules`. Needs
    `include_external_packages = true` (the standard library's modules are graph nodes then)."""

    type_name = "allowed_imports"

    source_modules = fields.ListField(subfield=fields.StringField())
    allowed_modules = fields.ListField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        sources = list(self.source_modules)  # type: ignore[attr-defined]
        allowed = [*sources, *self.allowed_modules]  # type: ignore[attr-defined]
        violations: dict[str, _Unallowed] = {}  # one chain for each module not allowed
        for source in sources:
            for importer in sorted({source} | graph.find_descendants(source)):
                for imported in sorted(graph.find_upstream_modules(importer)):
                    if imported in violations or imported.split(".")[0] in sys.stdlib_module_names:
                        continue
                    if any(_within(imported, module) for module in allowed):
                        continue
                    chain = graph.find_shortest_chain(importer=importer, imported=imported)
                    violations[imported] = _Unallowed(importer, imported, tuple(chain or ()))
        found = list(violations.values())
        return ContractCheck(kept=not found, metadata={"violations": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for v in check.metadata["violations"]:
            output.print_error(f"{v.importer} imports {v.imported}: {' -> '.join(v.chain)}")
        output.new_line()
