"""mypy sees zvf's public API as typed: the checks in check_public_api.py hold, and src/zvf/api/
passes ``mypy --strict``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy")

ROOT = Path(__file__).resolve().parents[2]
CHECKS = Path(__file__).with_name("check_public_api.py")


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
