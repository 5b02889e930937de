"""The import graph of planner (every import, at module level or inside a function) holds no cycle
through the shared rules, the CLI options or a launcher: rules.py sits below the launchers, and the
launchers below options.py (issue 44). The layer order itself is the import-linter contract in
pyproject.toml; this test needs no tool and sees the imports inside functions too."""

from __future__ import annotations

import ast
from collections import defaultdict
from functools import cache
from pathlib import Path

import planner

ROOT = Path(planner.__file__).parent


def _module(path: Path) -> str:
    parts = ["planner", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the planner modules it imports (a name imported from a package counts as its
    submodule where one exists)."""
    mods = {_module(p): p for p in root.rglob("*.py")}

    def known(name: str) -> str:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("planner") and not node.level:
                targets = [known(f"{node.module}.{a.name}") for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [known(a.name) for a in node.names if a.name.startswith("planner")]
            else:
                continue
            graph[name] |= {t for t in targets if t not in ("", "planner", name)}
        graph.setdefault(name, set())
    return graph


@cache
def _planner_graph() -> dict[str, frozenset[str]]:
    """planner's import_graph(), built once for this module's tests (it parses every module)."""
    return {m: frozenset(ts) for m, ts in import_graph().items()}


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def _held(module: str) -> bool:
    return module in ("planner.rules", "planner.options") or module.startswith("planner.launchers.")


def test_no_cycle_through_rules_options_or_launchers():
    bad = [sorted(c) for c in cycles(_planner_graph()) if any(_held(m) for m in c)]
    assert bad == []


def test_the_cycle_check_finds_a_cycle():
    graph = {"planner.rules": {"planner.launchers.registry"}, "planner.launchers.registry": {"planner.options"},
             "planner.options": {"planner.rules"}, "planner.units": set()}
    assert cycles(graph) == [{"planner.rules", "planner.launchers.registry", "planner.options"}]


def test_rules_import_no_launcher_and_launchers_no_command_layer():
    graph = _planner_graph()
    assert not {t for t in graph["planner.rules"] if t.startswith("planner.launchers")}
    above = ("planner.options", "planner.commands", "planner.search", "planner.report", "planner.validate")
    up = {(m, t) for m, ts in graph.items() if m.startswith("planner.launchers") for t in ts if t.startswith(above)}
    assert up == set()
