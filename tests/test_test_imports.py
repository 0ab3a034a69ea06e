"""Tests import shared helpers from tests/support/ (and the server and reference-store helpers beside
conftest.py) only: never another test module, a conftest or a test package's ``__init__``, so that a
test module runs alone, in any order, on any worker.  Read with ``ast``, imports inside functions
included."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ALLOWED = ("tests.support", "tests.servers", "tests.refstores")


def _imported(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every ``tests.*`` import in ``path``."""
    package = ["tests", *path.relative_to(TESTS).parent.parts]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            out.append((node.lineno, module))
    return [(line, name) for line, name in out if name == "tests" or name.startswith("tests.")]


def test_tests_import_only_shared_helpers():
    wrong = []
    for path in sorted(TESTS.rglob("*.py")):
        for line, name in _imported(path):
            if not any(name == a or name.startswith(a + ".") for a in ALLOWED):
                wrong.append(f"{path.relative_to(TESTS.parent)}:{line} imports {name}")
    assert not wrong, "\n".join(wrong)
