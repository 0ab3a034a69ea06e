"""Shared pieces of the reliability suite.

* ``RESULTS``: tables the tests produce (fault matrix, crash runs, fuzz counts,
  validator agreement).  They are printed in the pytest terminal summary and,
  when ``ZVF_RELIABILITY_DOC=1``, written into the marked sections of
  docs/RELIABILITY.md.
* ``FUZZ_COUNTS``: examples run per fuzz target (summed into the summary line).
* ``ref_stores`` (session): a directory of reference stores written by
  zarr-vectors 0.9.2 -- the shared fixtures when present, else stores built
  here with the reference package.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import REF_FIXTURES as SHARED

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "RELIABILITY.md"

RESULTS: dict[str, str] = {}
FUZZ_COUNTS: collections.Counter = collections.Counter()
FUZZ_FINDINGS: dict[str, str] = {}  # failure site -> example, for non-ZvfError exceptions outside the validator


def record_table(name: str, text: str) -> None:
    """Keep a result table for the summary (and the doc, see module docstring)."""
    RESULTS[name] = text.rstrip() + "\n"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    tr = terminalreporter
    if FUZZ_COUNTS:
        total = sum(FUZZ_COUNTS.values())
        parts = ", ".join(f"{k}={v}" for k, v in sorted(FUZZ_COUNTS.items()))
        line = f"zvf metadata fuzz: {total} cases ({parts})"
        tr.write_line(line)
        lines = [f"{total} cases ({parts}).", ""]
        if FUZZ_FINDINGS:
            lines.append("Parsers and validator: only ZvfError subclasses (the validator never raised). "
                         "The read path raised something else at:")
            lines.append("")
            lines += [f"* `{site}` -- e.g. {ex}" for site, ex in sorted(FUZZ_FINDINGS.items())]
        else:
            lines.append("Every case raised only ZvfError subclasses or parsed; the validator never raised.")
        record_table("fuzz", "\n".join(lines))
        for site in sorted(FUZZ_FINDINGS):
            tr.write_line(f"  non-ZvfError in the read path: {site}")
    for name in ("faults", "crash", "agreement"):
        if name in RESULTS:
            tr.write_sep("-", f"reliability: {name}")
            for row in RESULTS[name].splitlines():
                tr.write_line(row)
    if os.environ.get("ZVF_RELIABILITY_DOC") == "1" and RESULTS and DOC.exists():
        text = DOC.read_text()
        for name, table in RESULTS.items():
            pat = re.compile(rf"(<!-- begin:{name} -->\n).*?(<!-- end:{name} -->)", re.DOTALL)
            text = pat.sub(lambda m, table=table: m.group(1) + table + m.group(2), text)
        DOC.write_text(text)


def _build_reference_stores(out: Path) -> None:
    """A few stores written by zarr-vectors 0.9.2 (used when the shared fixtures are absent)."""
    import numpy as np
    from zarr_vectors import building as zb

    rng = np.random.default_rng(7)
    pos = rng.uniform(0, 100, (300, 3)).astype(np.float32)
    if not (out / "points3d.zarrvectors").exists():
        zb.write_points(str(out / "points3d.zarrvectors"), pos, chunk_shape=(50.0,) * 3, bin_shape=(25.0,) * 3,
                        bounds=([0.0] * 3, [100.0] * 3),
                        vertex_attributes={"intensity": rng.random(300).astype(np.float32)})
    ang = np.linspace(0, 2 * np.pi, 10, endpoint=False)
    ring = np.c_[50 + 20 * np.cos(ang), 50 + 20 * np.sin(ang), 30 + 30 * (np.arange(10) % 2)]
    clus = np.r_[rng.uniform(5, 45, (6, 3)), [[80.0, 80.0, 80.0], [85.0, 20.0, 70.0]]]
    gpos = np.r_[ring, clus].astype(np.float32)
    oids = np.r_[np.zeros(10, int), np.ones(8, int)]
    edges = np.array([[i, (i + 1) % 10] for i in range(10)] + [[0, 5]]
                     + [[10 + i, 11 + i] for i in range(7)] + [[10, 13]], dtype=np.int64)
    zb.write_graph(str(out / "graph.zarrvectors"), gpos, edges, chunk_shape=(50.0,) * 3, bin_shape=(25.0,) * 3,
                   bounds=([0.0] * 3, [100.0] * 3), object_ids=oids, kind="graph",
                   vertex_attributes={"val": rng.random(len(gpos)).astype(np.float32)},
                   link_attributes={"w": np.arange(len(edges), dtype=np.float32)},
                   object_attributes={"score": np.array([1.5, -2.0], dtype=np.float32)})
    pls = []
    for _ in range(4):
        start = rng.uniform(10, 90, 3)
        steps = rng.normal(0, 8, (10, 3))
        pls.append(np.clip(start + np.cumsum(steps, axis=0), 0, 100).astype(np.float32))
    zb.write_polylines(str(out / "polylines2.zarrvectors"), pls, chunk_shape=(50.0,) * 3,
                       bounds=([0.0] * 3, [100.0] * 3), geometry_type="polyline")


@pytest.fixture(scope="session")
def ref_stores(tmp_path_factory) -> Path:
    """Directory of ``*.zarrvectors`` stores written by the reference (read-only: copy before editing)."""
    if SHARED.is_dir() and any(SHARED.glob("*.zarrvectors")):
        return SHARED
    pytest.importorskip("zarr_vectors")
    out = tmp_path_factory.mktemp("refstores")
    try:
        from tests.refstores import reference_stores  # point stores with ground truth (optional)
    except ImportError:
        pass
    else:
        out = Path(reference_stores(out))
    _build_reference_stores(out)  # graph and polylines (and points3d if still missing)
    return out


@pytest.fixture
def copy_store(ref_stores, tmp_path):
    """``copy_store(name)`` -> a private copy of a reference store."""

    def make(name: str) -> Path:
        dst = tmp_path / f"{name}.zarrvectors"
        shutil.copytree(ref_stores / f"{name}.zarrvectors", dst)
        return dst

    return make
