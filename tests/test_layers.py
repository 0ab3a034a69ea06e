"""The import contract of ``src/zvf`` (docs/DESIGN.md "Layers"): no import cycle among zvf modules and
every import pointing down the layers, imports inside functions included (``TYPE_CHECKING`` blocks
aside: they never run).  Built from the source with ``ast``, so nothing is imported to check it."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# Layer of each top-level module or package of zvf, lowest first.  A module imports its own layer or lower.
LAYERS: dict[str, int] = {
    "errors": 0, "config": 0, "format": 0,
    "io": 1, "testing": 1,
    "read": 2, "write": 2,
    "lifecycle": 3,
    "distributed": 4, "converters": 4, "neuroglancer": 4, "validation": 4,
    "api": 5, "aio": 5, "dask": 5, "__init__": 5,
    "cli": 6,
}

# Modules of one layer that must not import each other, (importer, imported): readers never load the
# writers (nor the writers the readers: they share format/ and io/), errors.py imports nothing of zvf
# (config.py only errors),
# and the layer-4 packages stand beside each other (a user of one never loads another).
_BESIDE = ("distributed", "converters", "neuroglancer", "validation")
APART = {("read", "write"), ("write", "read"), ("errors", "format"), ("errors", "config"),
         ("config", "format")} | {
    (a, b) for a in _BESIDE for b in _BESIDE if a != b}


def _modules() -> dict[str, Path]:
    out = {}
    for path in (SRC / "zvf").rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """Nodes under ``if TYPE_CHECKING:`` (the body only: an ``else`` runs)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                skip.update(id(n) for n in ast.walk(stmt))
    return skip


def import_graph() -> dict[str, dict[str, int]]:
    """zvf module -> {zvf module it imports: line of the first such import}."""
    mods = _modules()
    graph: dict[str, dict[str, int]] = {m: {} for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        skip = _type_checking_nodes(tree)
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    origin = ".".join(base + ([node.module] if node.module else []))
                else:
                    origin = node.module or ""
                # ``from pkg import module`` imports the module; ``from module import name`` the module
                targets = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in mods else origin for a in node.names]
            for target in targets:
                while target and target not in mods:  # ``import zvf.read.load`` names the module itself
                    target = target.rpartition(".")[0]
                if target.startswith("zvf") and target != mod:
                    graph[mod].setdefault(target, node.lineno)
    return graph


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph[nxt])))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        comp.append(m)
                        if m == node:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def test_the_graph_sees_imports_inside_functions():
    graph = import_graph()
    assert "zvf.lifecycle.append" in graph["zvf.api.dataset"]  # imported inside the append_* methods
    assert "zvf.api.sync" not in graph["zvf"]  # zvf/__init__ names its facade only for type checkers
    assert "zvf.read.columns" in graph["zvf.read.selection"]


def test_no_import_cycle():
    cycles = _cycles(import_graph())
    assert not cycles, "\n".join(" <-> ".join(c) for c in cycles)


def test_every_top_level_module_has_a_layer():
    assert {_top(m) for m in _modules()} - set(LAYERS) == set()


def test_imports_run_down_the_layers():
    wrong = []
    for mod, targets in import_graph().items():
        for target, line in targets.items():
            a, b = _top(mod), _top(target)
            if LAYERS[b] > LAYERS[a] or (a, b) in APART:
                wrong.append(f"{mod}:{line} imports {target} ({a}: layer {LAYERS[a]}, {b}: layer {LAYERS[b]})")
    assert not wrong, "\n".join(wrong)
