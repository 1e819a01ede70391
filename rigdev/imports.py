"""The project's import graph, module by module and package by package, and its circles.

    .venv/bin/python -m rigdev.imports            # the package graph, then any circle
    .venv/bin/python -m rigdev.imports --modules  # the module graph instead
    .venv/bin/python -m rigdev.imports --floors   # the three programs and what they stand on

Every import statement counts, those under `if TYPE_CHECKING:` and inside functions
too: a circle that only a type checker or a late import hides is still a circle for
the reader. At package level a node is a package (a folder with `__init__.py`), and an
edge A -> B means a module of A imports one of B. An edge between a package and one
of its own ancestors is left out: a room may use the spine of the house it stands in
(`exporter.daemon.snapshot`), and the spine assembles the rooms (`exporter.daemon.runtime`).
Exit status 1 when there is a circle.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The top-level folders whose modules make the graph.
TREES = ("exporter", "alerts", "dashboards", "rigdev", "bench", "tests")

Graph = Mapping[str, set[str]]

#: The three programs, each a floor of `exporter/`, and what each may stand on. The
#: spine (the rest of `exporter/`) is shared by all three and stands on none of them;
#: the simulator runs a real exporter in-process, and rigctl drives both.
FLOORS = {"daemon": "exporter.daemon", "sim": "exporter.sim", "rigctl": "exporter.rigctl"}
FLOORS_BELOW = {
    "spine": set(),
    "daemon": {"spine"},
    "sim": {"spine", "daemon"},
    "rigctl": {"spine", "daemon", "sim", "alerts", "dashboards"},
    "alerts": {"spine"},
    "dashboards": {"spine", "alerts"},
}
#: `python -m exporter` is rig-exporter's entry point: the daemon's, though it sits at
#: the spine's door.
_DAEMON_DOORS = {"exporter.__main__"}


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the trees by dotted name; a package by its own name."""
    found = {}
    for tree in TREES:
        for path in sorted((root / tree).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if any(part.startswith(".") or part == "fixtures" for part in parts):
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            # `x.dashboard.py` files are loaded by path, not imported: named as they are.
            found[".".join(parts)] = path
    return found


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _imported(name: str, path: Path, node: ast.Import | ast.ImportFrom) -> Iterable[str]:
    """The dotted names an import statement asks for: `from package import module`
    names the module, `from module import name` the module."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        package = name.split(".")
        package = package[:len(package) - node.level + (1 if _is_package(path) else 0)]
        base = ".".join([*package, base] if base else package)
    for alias in node.names:
        yield f"{base}.{alias.name}"


def _ours(target: str, found: Mapping[str, Path]) -> str | None:
    """The module of ours that `target` names or lies in; None for anything else."""
    while target and target not in found:
        target = target.rpartition(".")[0]
    return target or None


def module_graph(found: Mapping[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in found.items():
        graph[name]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for target in filter(None, (_ours(t, found) for t in _imported(name, path, node))):
                if target != name:
                    graph[name].add(target)
    return dict(graph)


def closure(roots: Iterable[str], graph: Graph) -> set[str]:
    """Every module that importing `roots` runs: what they import, transitively, and the
    packages each one stands in (importing `a.b.c` runs `a` and `a.b` first)."""
    seen: set[str] = set()
    waiting = list(roots)
    while waiting:
        name = waiting.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        waiting += [".".join(parts[:i]) for i in range(1, len(parts))]
        waiting += graph.get(name, ())
    return {name for name in seen if name in graph}


def package_of(name: str, found: Mapping[str, Path]) -> str:
    return name if _is_package(found[name]) else name.rpartition(".")[0] or name


def package_graph(graph: Graph, found: Mapping[str, Path]) -> dict[str, set[str]]:
    packages: dict[str, set[str]] = defaultdict(set)
    for source, targets in graph.items():
        a = package_of(source, found)
        packages[a]
        for target in targets:
            b = package_of(target, found)
            if a != b and not a.startswith(b + ".") and not b.startswith(a + "."):
                packages[a].add(b)
    return dict(packages)


def floor_of(name: str) -> str | None:
    """Which program (or beside-the-house tree) a module belongs to; None for the
    developers' trees (tests, bench, rigdev), which may use anything."""
    if name in _DAEMON_DOORS:
        return "daemon"
    for floor, prefix in FLOORS.items():
        if name == prefix or name.startswith(prefix + "."):
            return floor
    top = name.split(".")[0]
    return {"exporter": "spine", "alerts": "alerts", "dashboards": "dashboards"}.get(top)


def floor_graph(graph: Graph) -> dict[str, set[str]]:
    """floor -> the other floors its modules import."""
    floors: dict[str, set[str]] = {floor: set() for floor in FLOORS_BELOW}
    for source, targets in graph.items():
        a = floor_of(source)
        if a is None:
            continue
        floors[a] |= {b for b in map(floor_of, targets) if b not in (None, a)}
    return floors


def floors_out_of_place(graph: Graph) -> list[str]:
    """Each module import that reaches a floor its own may not stand on."""
    return sorted(
        f"{source} -> {target}" for source, targets in graph.items()
        for target in targets
        if (a := floor_of(source)) is not None and (b := floor_of(target)) not in (None, a)
        and b not in FLOORS_BELOW[a])


def circles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rigdev.imports", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    view = parser.add_mutually_exclusive_group()
    view.add_argument("--modules", action="store_true", help="the module graph")
    view.add_argument("--floors", action="store_true",
                      help="the three programs (daemon, sim, rigctl), the spine they share, "
                           "and which stands on which; exit 1 on an import out of place")
    args = parser.parse_args(argv)
    found = modules()
    graph = module_graph(found)
    if args.floors:
        for floor, below in floor_graph(graph).items():
            print(f"{floor} -> {', '.join(sorted(below)) or '(nothing of ours)'}")
        misplaced = floors_out_of_place(graph)
        for edge in misplaced:
            print("out of place:", edge)
        return 1 if misplaced else 0
    if not args.modules:
        graph = package_graph(graph, found)
    for node in sorted(graph):
        if not node.startswith("tests") or args.modules:
            print(f"{node} -> {', '.join(sorted(graph[node])) or '(nothing of ours)'}")
    found_circles = circles(graph)
    for circle in found_circles:
        print("circle:", " <-> ".join(circle))
    return 1 if found_circles else 0


if __name__ == "__main__":
    sys.exit(main())
