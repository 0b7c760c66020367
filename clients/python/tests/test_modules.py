"""The package's module graph: no import cycle (top-level or inside a function), the leaves stay
leaves, and every module imports alone (without the package's ``__init__``) and loads exactly
the package modules its imports name."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from typing import Dict, List, Set

import pytest

import pushwoosh_agent

PACKAGE = "pushwoosh_agent"
DIRECTORY = os.path.dirname(pushwoosh_agent.__file__)
MODULES = sorted(name[:-3] for name in os.listdir(DIRECTORY) if name.endswith(".py") and name != "__init__.py")

#: What each foundation module may import from the package (the rest build on these).
ALLOWED = {
    "errors": set(),
    "paths": set(),
    "_version": set(),
    "_framing": {"errors"},
    "results": {"errors"},
    "_connection": {"errors", "_framing"},
    "events": {"errors", "_connection", "results"},
}


def _imports(module: str) -> Set[str]:
    """The package modules ``module`` imports, wherever in the file (a function-level import
    that dodges a cycle is still an edge)."""
    with open(os.path.join(DIRECTORY, module + ".py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    found: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level == 1 or base == PACKAGE or base.startswith(PACKAGE + "."):
                base = base[len(PACKAGE) + 1:] if base.startswith(PACKAGE) else base
                if base:
                    found.add(base.split(".")[0])
                else:  # from . import x
                    found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    found.add(alias.name.split(".")[1])
    return found - {module}


GRAPH: Dict[str, Set[str]] = {module: _imports(module) for module in MODULES}


def _closure(module: str) -> Set[str]:
    seen: Set[str] = set()
    todo = [module]
    while todo:
        for dep in GRAPH[todo.pop()]:
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_the_graph_names_only_modules_that_exist() -> None:
    assert {"client", "events", "errors", "paths", "results", "_framing", "_connection"} <= set(MODULES)
    for module, deps in GRAPH.items():
        assert deps <= set(MODULES), (module, deps)


def test_no_import_cycle() -> None:
    cycles: List[List[str]] = []

    def visit(module: str, path: List[str]) -> None:
        for dep in sorted(GRAPH[module]):
            if dep in path:
                cycles.append(path[path.index(dep):] + [dep])
            else:
                visit(dep, path + [dep])

    for module in MODULES:
        visit(module, [module])
    assert cycles == []


def test_the_foundation_imports_only_what_it_may() -> None:
    for module, allowed in ALLOWED.items():
        assert GRAPH[module] <= allowed, f"{module} imports {sorted(GRAPH[module] - allowed)}"


@pytest.mark.parametrize("module", MODULES)
def test_each_module_imports_alone(module: str) -> None:
    # A bare package object stands in for pushwoosh_agent (its __init__ would import everything).
    script = (
        "import importlib, json, sys, types\n"
        f"package = types.ModuleType({PACKAGE!r}); package.__path__ = [{DIRECTORY!r}]\n"
        f"sys.modules[{PACKAGE!r}] = package\n"
        f"importlib.import_module({PACKAGE + '.' + module!r})\n"
        f"print(json.dumps(sorted(m.split('.')[1] for m in sys.modules if m.startswith({PACKAGE + '.'!r}))))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)) == {module} | _closure(module)
