"""Object reads and cold opens: zvf against the floor of fetching exactly what is needed.

    .venv/bin/python benchmarks/read_objects.py                      # every row (~5 min on 2 quiet cores)
    .venv/bin/python benchmarks/read_objects.py --rows local --lines 20000 --reps 1   # quick
    .venv/bin/python benchmarks/read_objects.py --rows local --baseline /tmp/old/src  # before/after

Rows (medians of ``--reps``):

* ``local``: 200 k streamlines (10 M vertices) written by zvf to a local directory; a full
  read (``read_all``: positions + object ids), every object (``read_objects`` of all ids,
  combined, and an ``iter_objects`` pass), a pass of ``iter_chunks`` (the chunk-order stream)
  and ``export`` to ``.npz`` (by object, ``--export-reps`` runs), each after a fresh open, against the floor:
  GET every vertices cell and concatenate the rows (obstore).  A second column divides by the
  every-cell floor: the same GETs plus every other object ``read_all`` must fetch to label rows with
  their objects (the fragment-index cells and the object index), none of it decoded.  The export
  rows also name their ratio to an export floor: the floor's rows plus two int64 columns of the same
  length written with ``np.savez`` (an .npz of the export's size, from memory).  ``--baseline DIR``
  runs these rows with the zvf package in DIR too (e.g. the previous commit's ``src``), interleaved
  with the current one and the floors, each in its own worker subprocess warmed by one untimed run
  (the floors too: a long-lived parent's warm allocator made them up to a quarter faster than the
  same reads in a worker), so before/after ratios share the machine's load, each on a
  store its own zvf wrote (the same input: a layout change is measured writer and reader together); its
  "paired" column is the median over reps of each rep's floor / time (a rep's floor and jobs run
  back to back, so that ratio drifts less with the machine's load than the ratio of medians).
* ``seaweed``: the same store uploaded to SeaweedFS (``weed`` from the ``bench`` extra,
  started here on 127.0.0.1, as in ``benchmarks/write.py``), zvf over S3 against the same floor
  (``--baseline`` too).
* ``cold``: open + one 8-chunk box on a 1 M-point cloud (one attribute) on moto behind the
  latency proxy of ``benchmarks/run.py`` at ``--latency`` ms: zvf's default store (consolidated
  root) and its ``object_index_layout="reference"`` store (0.9.2's bytes, no consolidated
  section), each against the floor's 2 waves (the documents, then the cells).  ``RT`` is wall
  time / latency; ``waves`` is zvf's own count of dependent round trips.
* ``cold-objects``: open + one 8-chunk box of the 200 k streamlines (every object crossing it,
  rows labelled) on the same moto + proxy, each run in a fresh process; with ``--baseline`` also
  the baseline zvf on the store it wrote (a layout change shows in its waves and requests).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import workloads as w  # noqa: E402  (the latency proxy, moto, data generators)

LINES = w.Sizes("objects", n_points=1_000_000, grid=8, bins_per_axis=2, n_lines=200_000, line_len=50,
                n_queries=0, query_side=0.3, n_objects=0, ingest_points=0, ingest_batch=1)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def median_of(reps: int, fn, settle=None) -> tuple[float, object]:
    """Median wall time of ``reps`` runs of the coroutine function ``fn`` and its last result;
    ``settle()`` runs untimed after each run."""
    secs, out = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = asyncio.run(fn())
        secs.append(time.perf_counter() - t0)
        if settle is not None:
            settle()
    return statistics.median(secs), out


def settle(out_dir: Path) -> None:
    """Between timed runs: exports' files removed and written back, so the next run neither waits
    behind their writeback nor finds the disk fuller."""
    for p in Path(out_dir).glob("out-*.npz"):
        p.unlink()
    os.sync()


async def floor_read(store, keys: list[str], more: list[str] = ()) -> np.ndarray:
    """GET every vertex cell (and the ``more`` objects; 64 in flight) and concatenate the rows: what any
    reader must at least do.  Returns the rows."""
    import obstore

    sem = asyncio.Semaphore(w.FLOOR_CONCURRENCY)

    async def one(k: str):
        async with sem:
            return await (await obstore.get_async(store, k)).bytes_async()

    blobs = await asyncio.gather(*(one(k) for k in [*keys, *more]))
    rows = np.concatenate([np.frombuffer(b, np.float32)[2:] for b in blobs[:len(keys)]])  # after the vlen header
    return rows.reshape(-1, 3)


def cell_keys(root: Path, *arrays: str) -> list[str]:
    """Stored objects under ``0/<array>/c`` (the cells, or shards) of the given arrays."""
    return sorted(p.relative_to(root).as_posix() for a in arrays for p in (root / "0" / a / "c").rglob("*")
                  if p.is_file())


LABEL_ARRAYS = ("vertex_fragments", "object_index/manifests", "object_index/object_ids")
"""What ``read_all`` fetches besides the vertices, to label rows with their objects."""


def raw_store(url: str, opts: dict | None):
    """The obstore store the floor reads for the zvf store at ``url`` (a local path, or ``s3://bucket/prefix``
    with the SeaweedFS options zvf is given)."""
    from obstore.store import LocalStore, S3Store

    if not url.startswith("s3://"):
        return LocalStore(url)
    assert opts is not None
    bucket, _, prefix = url[len("s3://"):].partition("/")
    return S3Store(bucket, prefix=prefix, endpoint=opts["endpoint"], virtual_hosted_style_request=False,
                   client_options={"allow_http": bool(opts.get("allow_http")), "timeout": "120s"},
                   **{k: opts[k] for k in ("access_key_id", "secret_access_key", "region")})


def floor_job(kind: str, cells_dir: Path):
    """A floor (``floor``, ``floor-all``, ``floor-export``) as a job like the zvf ones (in process, or in a
    worker with ``--baseline``); the cells it GETs are listed now, from the store's local copy ``cells_dir``,
    outside the timed runs."""
    keys = cell_keys(cells_dir, "vertices")
    more = cell_keys(cells_dir, *LABEL_ARRAYS) if kind == "floor-all" else []

    async def run(url, opts, truth, out_dir):
        rows = await floor_read(raw_store(url, opts), keys, more)
        assert len(rows) == truth
        if kind == "floor-export":  # what an export to .npz costs at the least: the rows and two int64 columns
            ints = np.zeros(len(rows), np.int64)
            np.savez(Path(out_dir) / "out-floor.npz", positions=rows, object_ids=ints, vertex_index=ints)  # settle()
        return None
    return run


async def _open(url: str, opts: dict | None):
    import zvf.aio

    return await zvf.aio.open(url, storage_options=opts)


async def job_read_all(url, opts, truth, out_dir):
    ds = await _open(url, opts)
    sel = await ds.read_all()
    assert len(sel) == truth and sel.object_ids is not None and (sel.object_ids >= 0).all()
    return ds.stats.snapshot()


async def job_read_objects(url, opts, truth, out_dir):
    ds = await _open(url, opts)
    sel = await ds.read_objects(await ds.object_ids(), combined=True)
    assert len(sel) == truth and sel.offsets is not None
    return ds.stats.snapshot()


async def _stream(url, opts, truth, method: str):
    ds = await _open(url, opts)
    n = 0
    async for sel in getattr(ds, method)():
        n += len(sel)
    assert n == truth
    return ds.stats.snapshot()


async def job_iter_objects(url, opts, truth, out_dir):
    return await _stream(url, opts, truth, "iter_objects")


async def job_iter_chunks(url, opts, truth, out_dir):
    return await _stream(url, opts, truth, "iter_chunks")


async def job_export(url, opts, truth, out_dir):
    from zvf.read.export import export as export_level

    ds = await _open(url, opts)
    s = await export_level(ds, str(Path(out_dir) / f"out-{os.getpid()}.npz"))
    assert s["vertices"] == truth
    return ds.stats.snapshot()


async def job_box(url, opts, truth, out_dir):
    """Open + one 8-chunk box of streamlines (every object crossing it, labelled): the cold object query."""
    ds = await _open(url, opts)
    sel = await ds.query(w.eight_chunk_box(LINES))
    assert len(sel) and sel.object_ids is not None
    return {**ds.stats.snapshot(), "rows": len(sel)}


JOBS = {"read_all": job_read_all, "read_objects": job_read_objects, "iter_objects": job_iter_objects,
        "iter_chunks": job_iter_chunks, "export npz": job_export}
COLD_JOBS = {"box": job_box}  # run by the cold-objects rows, not by object_rows


def worker(args) -> None:
    """``--worker``: time one job in this process (``PYTHONPATH`` picks the zvf) and print JSON.

    An untimed run of the same job (its own fresh open) goes first, so the timed one finds
    the process as the in-process rows and the floor do: modules imported, thread pools and
    the allocator's memory in place -- not a cold interpreter's first touch of everything.
    """
    import json

    opts = json.loads(args.opts) if args.opts else None
    fn = floor_job(args.worker, Path(args.cells_dir)) if args.worker in FLOORS else {**JOBS, **COLD_JOBS}[args.worker]
    done = partial(settle, args.out_dir)
    median_of(1, lambda: fn(args.url, opts, args.truth, args.out_dir), done)
    secs, stats = median_of(1, lambda: fn(args.url, opts, args.truth, args.out_dir), done)
    print(json.dumps({"seconds": secs, "stats": stats}))


def run_worker(src: str, what: str, url: str, opts: dict | None, truth: int, out_dir: Path,
               cells_dir: Path | None = None) -> tuple[float, dict]:
    import json
    import subprocess

    env = {**os.environ, "PYTHONPATH": src}
    cmd = [sys.executable, __file__, "--worker", what, "--url", url, "--truth", str(truth), "--out-dir", str(out_dir)]
    if opts:
        cmd += ["--opts", json.dumps(opts)]
    if cells_dir is not None:
        cmd += ["--cells-dir", str(cells_dir)]
    res = json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)
    return res["seconds"], res["stats"]


FLOOR_ALL = "floor, every cell read_all needs"
FLOOR_EXPORT = "floor + writing an npz of the export's size"
FLOORS = {"floor": "floor", "floor-all": FLOOR_ALL, "floor-export": FLOOR_EXPORT}  # worker job -> row


def object_rows(url: str, opts: dict | None, cells_dir: Path, reps: int, out_dir: Path,
                truth: int, export_too: bool, baseline: str | None = None, jobs: list[str] | None = None,
                export_reps: int = 1, baseline_url: str | None = None) -> list[dict]:
    """Every job after a fresh open (median of ``reps``; export: of ``export_reps``), against the floor.

    With ``baseline`` (a directory holding another ``zvf`` package) each job
    also runs with that zvf (on ``baseline_url``, the store it wrote), and
    every job and floor runs in its own worker subprocess, interleaved rep by
    rep, so before, after and the floor share the machine's load and start
    from the same process state.
    """
    out = []
    whats = [w for w in (jobs or JOBS) if w != "export npz" or export_too]
    done = partial(settle, out_dir)
    if baseline is None:
        floor, floor_all, floor_export = (partial(floor_job(kind, cells_dir), url, opts, truth, out_dir)
                                          for kind in FLOORS)
        out.append({"what": "floor", "seconds": median_of(reps, floor, done)[0], "stats": None})
        out.append({"what": FLOOR_ALL, "seconds": median_of(reps, floor_all, done)[0], "stats": None})
        if "export npz" in whats:
            out.append({"what": FLOOR_EXPORT, "seconds": median_of(min(export_reps, reps), floor_export, done)[0],
                        "stats": None})
        for what in whats:
            secs, stats = median_of(min(export_reps, reps) if what == "export npz" else reps,
                                    lambda what=what: JOBS[what](url, opts, truth, out_dir), done)
            out.append({"what": what, "seconds": secs, "stats": stats})
            log(f"  {what:12} {secs:7.3f} s  requests {stats['requests']}, max in flight {stats['max_inflight']}")
        return out
    here = str(HERE.parent / "src")
    times: dict = {"floor": [], FLOOR_ALL: [], **({FLOOR_EXPORT: []} if "export npz" in whats else {})}
    for what in whats:
        times[what], times[f"{what} (baseline)"] = [], []
    last: dict = {}
    for rep in range(reps):
        for kind, label in FLOORS.items():
            if label in times and (label != FLOOR_EXPORT or rep < export_reps):
                times[label].append(run_worker(here, kind, url, opts, truth, out_dir, cells_dir)[0])
        for what in whats:
            if what == "export npz" and rep >= export_reps:
                continue
            for label, src, at in ((f"{what} (baseline)", baseline, baseline_url or url), (what, here, url)):
                secs, last[label] = run_worker(src, what, at, opts, truth, out_dir)
                times[label].append(secs)
                log(f"  rep {rep} {label:24} {secs:7.3f} s  requests {last[label]['requests']}")
    for label, secs in times.items():
        # floor and jobs of one rep run back to back: their ratio drifts less with the machine's load
        paired = statistics.median(f / t for f, t in zip(times["floor"], secs))
        out.append({"what": label, "seconds": statistics.median(secs), "stats": last.get(label), "paired": paired})
    return out


def cold_object_rows(store: Path, base_store: Path, baseline: str | None, latency_ms: float, reps: int,
                     out_dir: Path) -> list[tuple[str, float, dict]]:
    """Open + one 8-chunk box of the streamlines on moto behind the latency proxy, each run in a fresh
    subprocess after an untimed one (median of ``reps``); with ``baseline`` also that zvf on its own store."""
    servers = w.Servers()
    try:
        runs = [("zvf", str(HERE.parent / "src"), store, "lines")]
        if baseline:
            runs.append(("zvf (baseline)", baseline, base_store, "lines-baseline"))
        for _, _, path, prefix in runs:
            asyncio.run(w.upload_dir(servers.obstore(prefix, direct=True), path))
        servers.set_latency(latency_ms / 1000)
        opts = servers.zvf_options()
        times: dict[str, list] = {label: [] for label, *_ in runs}
        last: dict[str, dict] = {}
        for _ in range(reps):
            for label, src, _, prefix in runs:
                secs, last[label] = run_worker(src, "box", servers.url(prefix), opts, 0, out_dir)
                times[label].append(secs)
        return [(label, statistics.median(times[label]), last[label]) for label, *_ in runs]
    finally:
        servers.stop()


def build_lines(root: Path, n_lines: int) -> int:
    import zvf

    sizes = LINES if n_lines == LINES.n_lines else w.Sizes(**{**LINES.__dict__, "n_lines": n_lines})
    lines = w.make_streamlines(sizes)
    t0 = time.perf_counter()
    zvf.write_polylines(str(root), lines, chunk_shape=(sizes.chunk,) * 3, bounds=sizes.bounds,
                        geometry_type="streamline", overwrite=True)
    n = sum(len(v) for v in lines)
    log(f"wrote {len(lines):,} streamlines ({n:,} vertices) in {time.perf_counter() - t0:.1f} s")
    del lines
    os.sync()  # the timed reads neither wait behind the store's writeback
    gc.collect()  # nor pay for collecting the build's garbage
    return n


def cold_rows(tmp: Path, latency_ms: float, reps: int) -> list[dict]:
    """Open + one 8-chunk box on S3 behind the latency proxy: zvf's store and 0.9.2's layout."""
    import zvf
    import zvf.aio

    sizes = LINES
    pos, attrs = w.make_points(sizes)
    lo, hi = w.eight_chunk_box(sizes)
    truth = w.count_in_box(pos, lo, hi)
    servers = w.Servers()
    try:
        out = []
        for layout in ("sharded", "reference"):
            local = tmp / f"points-{layout}"
            zvf.write_points(str(local), pos, chunk_shape=(sizes.chunk,) * 3, bin_shape=(sizes.bin,) * 3,
                             bounds=sizes.bounds, attributes=attrs, object_index_layout=layout, overwrite=True)
            prefix = f"points-{layout}"
            asyncio.run(w.upload_dir(servers.obstore(prefix, direct=True), local))
            needed_docs = ["zarr.json"] if layout == "sharded" else w.point_meta_keys(list(attrs))
            cells = w.point_cell_keys(w.chunk_range(sizes, lo, hi), list(attrs),
                                      set(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file()))
            servers.set_latency(latency_ms / 1000)
            opts = servers.zvf_options()

            async def zvf_run(prefix=prefix, opts=opts):  # bound now: run within this iteration
                ds = await zvf.aio.open(servers.url(prefix), storage_options=opts)
                sel = await ds.query((lo, hi))
                assert len(sel) == truth
                return ds.stats.snapshot()

            async def floor_run(prefix=prefix, needed_docs=needed_docs, cells=cells):
                store = servers.obstore(prefix)
                await w.fetch_all(store, needed_docs)
                await w.fetch_all(store, cells)

            for impl, fn in (("zvf", zvf_run), ("floor", floor_run)):
                servers.reset()
                secs, stats = median_of(reps, fn)
                counts = {k: v / reps for k, v in servers.counts().items() if isinstance(v, (int, float))}
                waves = stats["round_trips"] if stats else 2
                out.append({"layout": layout, "impl": impl, "seconds": secs, "waves": waves,
                            "rt": secs / (latency_ms / 1000), "counts": counts})
                log(f"  cold {layout:9} {impl:5} {secs:6.3f} s  {secs / (latency_ms / 1000):5.1f} RT  waves {waves}")
            servers.set_latency(0)
        return out
    finally:
        servers.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="local,seaweed,cold,cold-objects")
    ap.add_argument("--lines", type=int, default=LINES.n_lines)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--latency", type=float, default=20.0)
    ap.add_argument("--markdown", help="append the table to this file")
    ap.add_argument("--no-export", action="store_true", help="skip the export rows")
    ap.add_argument("--export-reps", type=int, default=1, help="runs of the export rows (at most --reps; default 1)")
    ap.add_argument("--baseline", help="a directory holding another zvf package (e.g. the previous commit's src): "
                                       "local and SeaweedFS rows also run with it, side by side, in subprocesses, "
                                       "on a store it writes")
    ap.add_argument("--build", help=argparse.SUPPRESS)  # write the lines store here (with PYTHONPATH's zvf) and exit
    ap.add_argument("--jobs", help=f"local/SeaweedFS rows to run, comma-separated (default all: {','.join(JOBS)})")
    ap.add_argument("--worker", choices=sorted({**JOBS, **COLD_JOBS, **FLOORS}), help=argparse.SUPPRESS)
    ap.add_argument("--cells-dir", help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--opts", help=argparse.SUPPRESS)
    ap.add_argument("--truth", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if args.build:
        build_lines(Path(args.build), args.lines)
        return None
    rows = args.rows.split(",")
    jobs = args.jobs.split(",") if args.jobs else None
    if jobs and set(jobs) - set(JOBS):
        ap.error(f"--jobs: unknown {sorted(set(jobs) - set(JOBS))}; choose from {list(JOBS)}")
    load0 = os.getloadavg()[0]
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="zvf-read-objects-") as tmp:
        tmp = Path(tmp)
        store = tmp / "lines.zarrvectors"
        truth = build_lines(store, args.lines) if {"local", "seaweed", "cold-objects"} & set(rows) else 0
        base_store = tmp / "lines-baseline.zarrvectors"
        if args.baseline and truth:
            import subprocess

            subprocess.run([sys.executable, __file__, "--build", str(base_store), "--lines", str(args.lines)],
                           env={**os.environ, "PYTHONPATH": args.baseline}, check=True)
        keys = cell_keys(store, "vertices") if truth else []
        more = cell_keys(store, *LABEL_ARRAYS) if truth else []
        table = ["| row | what | time s | floor / time | every-cell floor / time | paired floor / time | requests |",
                 "|---|---|---|---|---|---|---|"]

        def add(where: str, res: list[dict]) -> None:
            floor, floor_all = res[0]["seconds"], res[1]["seconds"]
            floor_export = next((r["seconds"] for r in res if r["what"] == FLOOR_EXPORT), None)
            for r in res:
                req = r["stats"]["requests"] if r["stats"] else len(keys) + (len(more) if r["what"] == FLOOR_ALL else 0)
                if r["what"].startswith("export") and floor_export:
                    r = {**r, "what": f"{r['what']} (export floor / time: {floor_export / r['seconds']:.2f})"}
                paired = "-" if r.get("paired") is None else f"{r['paired']:.2f}"
                table.append(f"| {where} | {r['what']} | {r['seconds']:.3f} | {floor / r['seconds']:.2f} "
                             f"| {floor_all / r['seconds']:.2f} | {paired} | {req} |")

        if "local" in rows:
            log("local:")
            add("local", object_rows(str(store), None, store, args.reps, tmp, truth, not args.no_export,
                                     args.baseline, jobs, args.export_reps, str(base_store)))
        if "seaweed" in rows:
            import write as wb  # the SeaweedFS server of the write benchmark

            log("SeaweedFS:")
            weed = wb.Seaweed(tmp)
            try:
                url = "s3://zvf-write/read-objects"
                opts = {"endpoint": weed.endpoint, "allow_http": True, **wb.S3_KEYS}
                asyncio.run(w.upload_dir(raw_store(url, opts), store))
                if args.baseline:
                    asyncio.run(w.upload_dir(raw_store(f"{url}-baseline", opts), base_store))
                add("SeaweedFS", object_rows(url, opts, store, args.reps, tmp, truth, not args.no_export,
                                             args.baseline, jobs, args.export_reps, f"{url}-baseline"))
            finally:
                weed.stop()
        if "cold" in rows:
            log(f"cold open + first box at {args.latency:g} ms:")
            cold = cold_rows(tmp, args.latency, args.reps)
            table += ["", f"| open + 8-chunk box, S3 (moto) at {args.latency:g} ms | impl | time s | RT | waves "
                          "| GETs | LISTs |", "|---|---|---|---|---|---|---|"]
            for r in cold:
                c = r["counts"]
                table.append(f"| {'zvf default (consolidated root)' if r['layout'] == 'sharded' else '0.9.2 layout'} "
                             f"| {r['impl']} | {r['seconds']:.3f} | {r['rt']:.1f} | {r['waves']} "
                             f"| {c.get('GET', 0):g} | {c.get('LIST', 0):g} |")
        if "cold-objects" in rows:
            log(f"cold open + first object box at {args.latency:g} ms:")
            table += ["", f"| open + 8-chunk box of streamlines, S3 (moto) at {args.latency:g} ms | time s | RT "
                          "| waves | requests | rows |", "|---|---|---|---|---|---|"]
            for label, t, st in cold_object_rows(store, base_store, args.baseline, args.latency, args.reps, tmp):
                table.append(f"| {label} | {t:.3f} | {t / (args.latency / 1000):.1f} | {st['round_trips']} "
                             f"| {st['requests']} | {st['rows']} |")
    load1 = os.getloadavg()[0]
    head = (f"`benchmarks/read_objects.py --rows {args.rows} --lines {args.lines} --reps {args.reps}"
            f"{' --no-export' if args.no_export else ''}{' --jobs ' + args.jobs if args.jobs else ''}"
            f"{f' --export-reps {args.export_reps}' if args.export_reps != 1 else ''}"
            f"{' --baseline ' + args.baseline if args.baseline else ''}` "
            f"({time.perf_counter() - t_start:.0f} s; load average {load0:.1f} -> {load1:.1f} on "
            f"{os.cpu_count()} cores)")
    text = head + "\n\n" + "\n".join(table) + "\n"
    print(text)
    if args.markdown:
        with open(args.markdown, "a") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
