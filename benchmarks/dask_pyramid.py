"""zvf.dask.build_pyramid on this machine: 1 and 2 Dask worker processes against the serial build.

    .venv/bin/python benchmarks/dask_pyramid.py                        # 2 M points, 40 k streamlines x 50
    .venv/bin/python benchmarks/dask_pyramid.py --points 5e5 --streamlines 0 --reps 1

Level 0 is written once per input on a local directory store; every run
builds the pyramid on a fresh copy of it (the copy is not timed), the
cluster is started beforehand (its start-up is not timed either).  Each cell
is the median of ``--reps`` runs.  The load average is printed with the
table: on a shared machine the speed-up says as much about the neighbours as
about zvf.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import numpy as np


def level0(tmp: str, name: str, n_points: int, n_lines: int, per: int) -> str:
    import zvf

    path = os.path.join(tmp, name, "base")
    rng = np.random.default_rng(0)
    extent = 1000.0
    if name == "points":
        zvf.write_points(path, rng.uniform(0, extent, (n_points, 3)).astype(np.float32), chunk_shape=(100.0,) * 3,
                         bin_shape=(50.0,) * 3, bounds=([0.0] * 3, [extent] * 3))
    else:
        starts = rng.uniform(100, extent - 100, (n_lines, 1, 3))
        lines = list(np.clip(starts + rng.normal(0, 2.0, (n_lines, per, 3)).cumsum(axis=1), 0, extent)
                     .astype(np.float32))
        zvf.write_polylines(path, lines, geometry_type="streamline", chunk_shape=(100.0,) * 3,
                            bin_shape=(50.0,) * 3, bounds=([0.0] * 3, [extent] * 3))
    return path


def timed(base: str, build, reps: int) -> float:
    """Median seconds of ``build(path)`` on fresh copies of ``base`` (the copy is not timed)."""
    def once() -> float:
        path = base + ".run"
        shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(base, path)
        t0 = time.perf_counter()
        build(path)
        return time.perf_counter() - t0

    return statistics.median([once() for _ in range(reps)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=float, default=2e6)
    ap.add_argument("--streamlines", type=float, default=40e3)
    ap.add_argument("--vertices-per-streamline", type=int, default=50)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--blocks-per-task", type=int, default=4)
    args = ap.parse_args()

    from distributed import Client, LocalCluster

    import zvf
    import zvf.dask as zd

    factors = [(2, 1), (2, 1)]
    tmp = tempfile.mkdtemp(prefix="zvf-dask-pyramid-")
    inputs = [(name, level0(tmp, name, int(args.points), int(args.streamlines), args.vertices_per_streamline))
              for name, n in (("points", args.points), ("streamlines", args.streamlines)) if n > 0]
    rows = []
    try:
        for name, base in inputs:
            serial = timed(base, lambda p: zvf.build_pyramid(p, factors), args.reps)
            row = [name, serial]
            for workers in (1, 2):
                with LocalCluster(n_workers=workers, processes=True, threads_per_worker=1, dashboard_address=None,
                                  host="127.0.0.1") as cluster, Client(cluster) as client:
                    row.append(timed(base, lambda p: zd.build_pyramid(p, factors, client=client,
                                                                        blocks_per_task=args.blocks_per_task),
                                     args.reps))
            rows.append(row)
            print(f"{name:12} serial {row[1]:6.2f} s  dask 1 worker {row[2]:6.2f} s  2 workers {row[3]:6.2f} s  "
                  f"speed-up 2 vs 1: {row[2] / row[3]:.2f}x", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"load average {os.getloadavg()[0]:.1f} / {os.cpu_count()} cores; factors {factors}, "
          f"blocks_per_task {args.blocks_per_task}, median of {args.reps}")


if __name__ == "__main__":
    main()
