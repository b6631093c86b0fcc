"""No import circle among Thaw's product modules.

The graph is grimp's (import-linter's library) over the product packages: every import a module
makes, at the top, inside a function or under `TYPE_CHECKING`, package `__init__`s included. A
circle is a strongly connected component of that graph of more than one module (or a module
importing itself); each is reported with one of its cycles, so the import to move is in sight.
"""

from __future__ import annotations

import tomllib
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("activator", "runtime", "snapshotter", "thaw", "thawserver", "thawwire", "tritonconfig")

Graph = Mapping[str, Iterable[str]]


def strongly_connected(graph: Graph) -> list[list[str]]:
    """The strongly connected components of `graph` that hold a cycle (Tarjan's algorithm,
    iterative: the product graph is deeper than Python's recursion limit allows for)."""
    successors = {node: sorted(set(targets)) for node, targets in graph.items()}
    for targets in list(successors.values()):
        for target in targets:
            successors.setdefault(target, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for start in sorted(successors):
        if start in index:
            continue
        work: list[tuple[str, int]] = [(start, 0)]
        while work:
            node, position = work.pop()
            if position == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            targets = successors[node]
            if position < len(targets):
                work.append((node, position + 1))
                target = targets[position]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in successors[node]:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return sorted(found)


def one_cycle(graph: Graph, component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module, as `[a, b, ..., a]`."""
    members = set(component)
    start = component[0]
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for target in sorted(graph.get(node, ())):
            if target == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [start, *reversed(path[:-1]), start] if node != start else [start, start]
            if target in members and target not in came_from:
                came_from[target] = node
                queue.append(target)
    raise AssertionError(f"no cycle through {start} in {component}")


def product_graph() -> dict[str, set[str]]:
    """Module -> the product modules it imports directly."""
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    return {module: graph.find_modules_directly_imported_by(module) for module in graph.modules}


def describe(graph: Graph, components: list[list[str]]) -> str:
    return "\n".join(
        f"  {' -> '.join(one_cycle(graph, component))}"
        f"   (circle of {len(component)}: {', '.join(component)})"
        for component in components
    )


def test_the_packages_are_import_linters_root_packages() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert tuple(sorted(pyproject["tool"]["importlinter"]["root_packages"])) == PACKAGES


def test_no_import_circle_among_product_modules() -> None:
    graph = product_graph()
    circles = strongly_connected(graph)
    assert not circles, (
        "import circles among product modules (move the name one of them imports to the module "
        "below both, or give it its own module):\n" + describe(graph, circles)
    )


def test_a_circle_is_found_and_named() -> None:
    """The check above can fail: a circle of three beside a chain and a self-import."""
    graph = {
        "pkg.a": {"pkg.b"},
        "pkg.b": {"pkg.c", "pkg.leaf"},
        "pkg.c": {"pkg.a"},
        "pkg.leaf": set(),
        "pkg.chain": {"pkg.leaf"},
        "pkg.self": {"pkg.self"},
    }
    circles = strongly_connected(graph)
    assert circles == [["pkg.a", "pkg.b", "pkg.c"], ["pkg.self"]]
    assert describe(graph, circles).splitlines() == [
        "  pkg.a -> pkg.b -> pkg.c -> pkg.a   (circle of 3: pkg.a, pkg.b, pkg.c)",
        "  pkg.self -> pkg.self   (circle of 1: pkg.self)",
    ]
