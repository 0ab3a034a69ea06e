"""zvf.dask on this machine: ingest and export with 1 and 2 Dask worker processes, against the serial writers.

    .venv/bin/python benchmarks/dask_engine.py                       # 8 M points in 16 .npy files
    .venv/bin/python benchmarks/dask_engine.py --points 1e6 --files 8
    .venv/bin/python benchmarks/dask_engine.py --streamlines 2e5 --files 16   # object ingest instead

Each row is the median of ``--reps`` runs on a local directory store, the
cluster started beforehand (its start-up is not timed).  The load average is
printed with the table: on a shared machine the speed-up says as much about
the neighbours as about zvf.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import tempfile
import time

import numpy as np


def timed(fn, reps: int) -> float:
    out = []
    for _ in range(reps):
        os.sync()  # the previous run's dirty pages go to disk before the clock starts, not during the run
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=float, default=8e6)
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--chunk", type=float, default=100.0, help="chunk edge (coordinates are uniform in 0..1000)")
    ap.add_argument("--streamlines", type=float, default=0,
                    help="ingest this many 50-vertex streamlines instead of points (object writers)")
    args = ap.parse_args()
    if args.streamlines:
        return streamlines(args)

    from distributed import Client, LocalCluster

    import zvf
    import zvf.dask as zd

    n, k = int(args.points), args.files
    tmp = tempfile.mkdtemp(prefix="zvf-dask-bench-")
    rng = np.random.default_rng(0)
    files, parts = [], []
    for i in range(k):
        p = rng.uniform(0, 1000, (n // k, 3)).astype(np.float32)
        parts.append(p)
        files.append(os.path.join(tmp, f"in{i:03d}.npy"))
        np.save(files[-1], p)
    chunk = (args.chunk,) * 3
    rows = []

    made: dict[str, str] = {}
    runs = itertools.count()

    def fresh(name: str) -> str:
        """A new store path per run, all deleted at the end (see the object rows below)."""
        made[name] = os.path.join(tmp, name, str(next(runs)), "cloud")
        return made[name]

    def serial_write():
        zvf.write_points(fresh("serial"), np.concatenate([np.load(f) for f in files]), chunk_shape=chunk)

    rows.append(("write_points, serial (in-memory)", timed(serial_write, args.reps)))
    stream = ({"positions": np.load(f)} for f in files)
    t0 = time.perf_counter()
    zvf.write_points(fresh("stream"), stream, chunk_shape=chunk)
    rows.append(("write_points, serial (streamed batches), 1 run", time.perf_counter() - t0))
    src = fresh("pts")
    zvf.write_points(src, np.concatenate(parts), chunk_shape=chunk)

    for workers in (1, 2):
        with LocalCluster(n_workers=workers, processes=True, threads_per_worker=1, dashboard_address=None,
                          host="127.0.0.1") as cluster, Client(cluster) as client:
            def ingest(workers=workers):
                zd.write_points(fresh(f"dask{workers}"), files, chunk_shape=chunk, client=client,
                                rows_per_task=max(1, n // (4 * k) * 4))

            def export():
                shutil.rmtree(os.path.join(tmp, "out"), ignore_errors=True)
                zd.export(src, os.path.join(tmp, "out"), batch_chunks=64, client=client)

            rows.append((f"zvf.dask.write_points, {workers} worker(s)", timed(ingest, args.reps)))
            rows.append((f"zvf.dask.export parquet, {workers} worker(s)", timed(export, args.reps)))

    t_serial_export = timed(lambda: zvf_export(src, os.path.join(tmp, "serial.parquet")), args.reps)
    rows.append(("zvf export parquet, serial", t_serial_export))
    report(f"{n:,} points in {k} files, chunk {args.chunk:g} (~{int((1000 / args.chunk) ** 3):,} chunks)",
           args.reps, rows, n, "points", ("write_points", "export parquet"))
    shutil.rmtree(tmp, ignore_errors=True)


def report(what: str, reps: int, rows: list, n: int, unit: str, jobs: tuple[str, ...]) -> None:
    """The table (rows/s in millions of ``unit``) and the speed-up of 2 workers over 1 for each of ``jobs``."""
    load = os.getloadavg()
    print(f"\n{what}, {os.cpu_count()} cores, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}, "
          f"median of {reps}\n")
    print(f"| run | seconds | M {unit}/s |\n|---|---:|---:|")
    for name, s in rows:
        print(f"| {name} | {s:.2f} | {n / s / 1e6:.2f} |")
    by = dict(rows)
    for job in jobs:
        one, two = by[f"zvf.dask.{job}, 1 worker(s)"], by[f"zvf.dask.{job}, 2 worker(s)"]
        print(f"\nspeed-up of 2 workers over 1, {job}: {one / two:.2f}x")


def files_of(root: str) -> dict[str, bytes]:
    """Every file of a store by relative path."""
    from pathlib import Path

    return {str(p.relative_to(root)): p.read_bytes() for p in Path(root).rglob("*") if p.is_file()}


def load_lines(path: str) -> dict:
    """One source of the streamline ingest: a batch from an .npz of concatenated vertices (on a worker)."""
    with np.load(path) as z:
        return {"polylines": np.split(z["vertices"], np.cumsum(z["lengths"])[:-1])}


def streamlines(args) -> None:
    """Object ingest: serial streamed write_polylines against zvf.dask.write_polylines on 1 and 2 workers."""
    import functools

    from distributed import Client, LocalCluster

    import zvf
    import zvf.dask as zd

    n, k, per = int(args.streamlines), args.files, 50
    tmp = tempfile.mkdtemp(prefix="zvf-dask-bench-")
    rng = np.random.default_rng(0)
    files = []
    for i in range(k):
        m = n // k
        start = rng.uniform(100, 900, (m, 1, 3))
        steps = rng.normal(0, 4, (m, per, 3)).cumsum(axis=1)
        files.append(os.path.join(tmp, f"in{i:03d}.npz"))
        np.savez(files[-1], vertices=(start + steps).reshape(-1, 3).astype(np.float32), lengths=np.full(m, per))
    chunk = (args.chunk,) * 3
    kw = {"chunk_shape": chunk, "geometry_type": "streamline", "bounds": ([0.0] * 3, [1000.0] * 3)}
    rows = []

    made: dict[str, str] = {}
    runs = itertools.count()

    def fresh(name: str) -> str:
        """A new store path per run, all deleted at the end: deleting the last run's thousands of files
        right before a write slows that write's file creations on ext4."""
        made[name] = os.path.join(tmp, name, str(next(runs)), "lines")
        return made[name]

    rows.append(("write_polylines, serial (streamed batches)",
                 timed(lambda: zvf.write_polylines(fresh("serial"), (load_lines(f) for f in files), **kw), args.reps)))
    sources = [functools.partial(load_lines, f) for f in files]
    for workers in (1, 2):
        with LocalCluster(n_workers=workers, processes=True, threads_per_worker=1, dashboard_address=None,
                          host="127.0.0.1") as cluster, Client(cluster) as client:
            rows.append((f"zvf.dask.write_polylines, {workers} worker(s)", timed(
                lambda workers=workers: zd.write_polylines(fresh(f"dask{workers}"), sources, client=client,
                                                           rows_per_task=n * per // 16, **kw), args.reps)))
    same = files_of(made["dask2"]) == files_of(made["serial"])
    report(f"{n:,} streamlines x {per} vertices in {k} files, chunk {args.chunk:g} (Dask store byte-identical "
           f"to the serial one: {same})", args.reps, rows, n * per, "vertices", ("write_polylines",))
    shutil.rmtree(tmp, ignore_errors=True)


def zvf_export(src: str, out: str) -> None:
    import anyio

    import zvf
    from zvf.read.export import export

    async def run():
        async with await zvf.aio.open(src) as ds:
            await export(ds, out, batch_chunks=64)

    anyio.run(run)


if __name__ == "__main__":
    main()
