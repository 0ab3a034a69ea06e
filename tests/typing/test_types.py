"""mypy sees zvf's public API as typed: the checks in check_public_api.py hold, and src/zvf/api/
passes ``mypy --strict``; users' scripts (user_*.py) type-check under mypy --strict and pyright's
strict mode with nothing typed Any or Unknown."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy")

ROOT = Path(__file__).resolve().parents[2]
CHECKS = Path(__file__).with_name("check_public_api.py")
CHAIN = Path(__file__).with_name("user_chain.py")
LIFECYCLE = Path(__file__).with_name("user_lifecycle.py")
USER_SCRIPTS = [CHAIN, LIFECYCLE]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One mypy cache for both runs (numpy's stubs are analysed once)."""
    return tmp_path_factory.mktemp("mypy-cache")


def _mypy(cache: Path, *paths: Path) -> list[str]:
    """mypy --strict on ``paths``; imported modules are analysed but only ``paths`` report errors."""
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-error-summary",
         "--show-absolute-path", "--cache-dir", str(cache), *map(str, paths)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert out.returncode in (0, 1), out.stderr
    return out.stdout.splitlines()


def test_public_api_types(cache):
    lines = _mypy(cache, CHECKS)
    source = CHECKS.read_text().splitlines()
    found = {}
    for line in lines:
        m = re.match(rf"{re.escape(str(CHECKS))}:(\d+): (error|note): (.*)", line)
        assert m, f"unexpected mypy output: {line}"
        found.setdefault((int(m[1]), m[2]), []).append(m[3])
    errors = {n for n, kind in found if kind == "error"}
    wanted = {i for i, text in enumerate(source, 1) if text.split("#")[-1].startswith(" E:")}
    assert errors == wanted, "\n".join(lines)
    reveals = {i: text.split("# R: ", 1)[1] for i, text in enumerate(source, 1) if "# R: " in text}
    assert reveals
    for i, want in reveals.items():
        note = " ".join(found.get((i, "note"), []))
        assert want in note, f"line {i}: revealed {note!r}, want {want!r}"


def test_api_package_is_strict_clean(cache):
    lines = _mypy(cache, ROOT / "src" / "zvf" / "api")
    assert lines == [], "\n".join(lines)


def _any_in(revealed: str) -> bool:
    """Whether a revealed type holds Any, beyond numpy's own array shape (``tuple[Any, ...]``)."""
    return "Any" in revealed.replace("tuple[Any, ...]", "") or "Unknown" in revealed


@pytest.mark.parametrize("script", USER_SCRIPTS, ids=lambda p: p.stem)
def test_user_script_mypy(cache, script):
    lines = _mypy(cache, script)
    errors = [line for line in lines if ": error: " in line]
    revealed = [line for line in lines if "Revealed type is" in line]
    assert not errors, "\n".join(errors)
    assert revealed
    assert not [line for line in revealed if _any_in(line)], "\n".join(revealed)


def _pyright() -> str | None:
    """pyright from $ZVF_PYRIGHT or PATH (``npm install pyright``); the suite runs without it."""
    return os.environ.get("ZVF_PYRIGHT") or shutil.which("pyright")


@pytest.mark.skipif(_pyright() is None, reason="pyright is not installed (npm install pyright; or set ZVF_PYRIGHT)")
@pytest.mark.parametrize("script", USER_SCRIPTS, ids=lambda p: p.stem)
def test_user_script_pyright(script):
    """pyright --outputjson in strict mode (the scripts say ``# pyright: strict``): no error, no warning, and
    no ``reveal_type`` showing Any or Unknown."""
    out = subprocess.run(
        [_pyright(), "--outputjson", "--pythonpath", sys.executable, str(script)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    report = json.loads(out.stdout)
    found = report["generalDiagnostics"]
    problems = [d for d in found if d["severity"] != "information"]
    revealed = [d["message"] for d in found if d["message"].startswith("Type of")]
    assert not problems, json.dumps(problems, indent=1)
    assert revealed
    assert not [m for m in revealed if _any_in(m)], "\n".join(revealed)
