"""Structure rules the code keeps (issue 18): the cost model is used through its public names,
the one composition is the only place memory and time are composed, and importing planner changes
nothing about the process."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLANNER = ROOT / "planner"


def _imports(path: Path):
    """(module, name) of every `from planner... import name` in a file."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("planner"):
            for alias in node.names:
                yield node.module, alias.name


def test_no_module_outside_cost_imports_a_private_name_from_it():
    found = []
    for path in sorted(PLANNER.rglob("*.py")):
        if (PLANNER / "cost") in path.parents:
            continue
        for module, name in _imports(path):
            if module.startswith("planner.cost") and name.startswith("_"):
                found.append(f"{path.relative_to(ROOT)}: from {module} import {name}")
    assert not found, found


def test_the_search_reads_costs_only_through_the_composition():
    """The search's tables and refinement compose no memory or time of their own: they import the
    composition and the reports, not the pieces it is made of."""
    pieces = {"planner.cost.pieces", "planner.cost.constant", "planner.cost.activations", "planner.cost.compute",
              "planner.cost.comm", "planner.cost.flops"}
    allowed = {("planner/search/stages.py", "planner.cost.pieces", "profile_matrix"),  # the schedule's in-flight rows
               # a type only (under TYPE_CHECKING): the per-layer memory the refinement reads from Costs
               ("planner/search/stages.py", "planner.cost.pieces", "LayerMemory")}
    found = []
    for path in sorted((PLANNER / "search").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        for module, name in _imports(path):
            if module in pieces and (rel, module, name) not in allowed:
                found.append(f"{rel}: from {module} import {name}")
    assert not found, found


def test_importing_planner_changes_no_environment_variable():
    code = ("import os, json; before = dict(os.environ); import planner, planner.cost.compose, planner.search.driver; "
            "print(json.dumps(sorted(k for k in os.environ if os.environ.get(k) != before.get(k))))")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]", out.stdout
