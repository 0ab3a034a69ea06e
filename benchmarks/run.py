"""zvf vs zarr-vectors 0.9.2 on S3 with latency: the one benchmark command.

    .venv/bin/python benchmarks/run.py                 # full sizes (~4.5 min on 2 quiet cores)
    .venv/bin/python benchmarks/run.py --quick         # tiny sizes (~30 s), what the smoke test runs
    .venv/bin/python benchmarks/run.py --rows open,queries --latency 20

It builds the same workloads with both implementations, serves them from moto
(child process) behind a counting proxy that adds a fixed latency to every
request (child process), runs every row for the reference, zvf and the floor
(plain obstore fetching exactly the needed keys at once), prints one table
and checks the targets.  See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import reference as ref  # noqa: E402
import workloads as w  # noqa: E402

ROWS = ("open", "queries", "object", "objects", "batch", "export", "cross", "ingest", "coldstart")
# Repetitions per row at full size (median kept); long rows run once.
FULL_REPS = {"open": 5, "object": 5, "batch": 5, "queries": 1, "objects": 1, "export": 3, "cross": 1}
ROW_TITLES = {
    "open": "open + one 8-chunk bbox query",
    "queries": "{n} random small bbox queries",
    "object": "1 object read after open",
    "objects": "{n} sequential object reads",
    "batch": "batch of {n} objects",
    "export": "full export ({n:,} points)",
    "cross": "cross-reads (other's store)",
    "ingest": "ingest {n:,} points",
    "coldstart": "cold start (process+open+read)",
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------


class Results:
    def __init__(self) -> None:
        self.rows: list[dict] = []

    def add(self, row: str, impl: str, latency_ms: float, seconds: float, counts: dict | None, *,
            ok: bool | None = True, note: str = "", **extra) -> dict:
        rec = {"row": row, "impl": impl, "latency_ms": latency_ms, "seconds": seconds,
               "counts": counts or {}, "ok": ok, "note": note, **extra}
        self.rows.append(rec)
        rt = f" {seconds / (latency_ms / 1000):.1f} RT" if latency_ms else ""
        c = counts or {}
        log(f"  {row:8} {latency_ms:>3.0f}ms {impl:6} {seconds:8.3f} s{rt}  GET {c.get('GET', '-')}  "
            f"LIST {c.get('LIST', '-')}  bytes {c.get('bytes', '-')}  "
            f"{'' if ok in (True, None) else 'CHECK FAILED'} {note}")
        return rec

    def get(self, row: str, impl: str, latency_ms: float) -> dict | None:
        for r in self.rows:
            if r["row"] == row and r["impl"] == impl and r["latency_ms"] == latency_ms:
                return r
        return None


def timed_sync(servers: w.Servers, fn):
    servers.reset()
    t0 = time.perf_counter()
    out = fn()
    secs = time.perf_counter() - t0
    return out, secs, servers.counts()


async def timed_async(servers: w.Servers, coro_fn):
    servers.reset()
    t0 = time.perf_counter()
    out = await coro_fn()
    secs = time.perf_counter() - t0
    return out, secs, servers.counts()


# --------------------------------------------------------------------------------------
# building the workloads
# --------------------------------------------------------------------------------------


class Workloads:
    """Data, ground truth and the store locations both implementations read."""

    def __init__(self, sizes: w.Sizes, servers: w.Servers, runner: asyncio.Runner, features: dict):
        self.sizes = sizes
        self.servers = servers
        self.runner = runner
        self.features = features
        self.notes: list[str] = []
        t0 = time.perf_counter()
        self.pos, self.attrs = w.make_points(sizes)
        self.lines = w.make_streamlines(sizes)
        self.line_lengths = np.array([len(x) for x in self.lines])
        log(f"generated {len(self.pos):,} points and {len(self.lines):,} streamlines "
            f"({int(self.line_lengths.sum()):,} vertices) in {time.perf_counter() - t0:.1f} s")
        self.box8 = w.eight_chunk_box(sizes)
        self.boxes = w.small_boxes(sizes)
        self.oids = w.object_sample(sizes)
        self.truth_box8 = w.count_in_box(self.pos, *self.box8)
        self.truth_boxes = [w.count_in_box(self.pos, lo, hi) for lo, hi in self.boxes]
        self.prefix = {"ref_points": "ref/points.zarrvectors", "zvf_points": "zvf/points.zarrvectors",
                       "ref_lines": "ref/streamlines.zarrvectors", "zvf_lines": "zvf/streamlines.zarrvectors"}
        self.build_info: dict = {}

    def url(self, name: str) -> str:
        return self.servers.url(self.prefix[name])

    def build(self) -> None:
        s, sv = self.sizes, self.servers
        with tempfile.TemporaryDirectory(prefix="zvf-bench-") as tmp:
            tmp = Path(tmp)
            t0 = time.perf_counter()
            ref.write_points_local(tmp / "points.zarrvectors", s, self.pos, self.attrs)
            t1 = time.perf_counter()
            ref.write_streamlines_local(tmp / "streamlines.zarrvectors", s, self.lines)
            t2 = time.perf_counter()
            nb = self.runner.run(w.upload_dir(sv.obstore(self.prefix["ref_points"], direct=True),
                                              tmp / "points.zarrvectors"))
            nb2 = self.runner.run(w.upload_dir(sv.obstore(self.prefix["ref_lines"], direct=True),
                                               tmp / "streamlines.zarrvectors"))
            t3 = time.perf_counter()
        self.build_info["ref"] = {"points_write_s": t1 - t0, "lines_write_s": t2 - t1, "upload_s": t3 - t2,
                                  "points_bytes": nb, "lines_bytes": nb2}
        log(f"reference: wrote points locally in {t1 - t0:.1f} s, streamlines in {t2 - t1:.1f} s, "
            f"uploaded {(nb + nb2) / 1e6:.1f} MB in {t3 - t2:.1f} s")

        import zvf.aio

        opts = sv.zvf_options(direct=True)
        t0 = time.perf_counter()
        self.runner.run(zvf.aio.write_points(
            self.url("zvf_points"), self.pos, chunk_shape=(s.chunk,) * 3, bin_shape=(s.bin,) * 3, bounds=s.bounds,
            attributes=self.attrs, overwrite=True, storage_options=opts))
        t1 = time.perf_counter()
        self.build_info["zvf"] = {"points_write_s": t1 - t0}
        log(f"zvf: wrote points straight to S3 in {t1 - t0:.1f} s")
        if self.features["write_polylines"]:
            try:
                self.runner.run(zvf.aio.write_polylines(
                    self.url("zvf_lines"), self.lines, chunk_shape=(s.chunk,) * 3, bounds=s.bounds,
                    geometry_type="streamline", overwrite=True, storage_options=opts))
                self.build_info["zvf"]["lines_write_s"] = time.perf_counter() - t1
                log(f"zvf: wrote streamlines straight to S3 in {time.perf_counter() - t1:.1f} s")
            except Exception as exc:
                self.features["write_polylines"] = False
                self.notes.append(f"zvf write_polylines failed ({type(exc).__name__}: {exc}); "
                                  "zvf reads the reference's streamline store")
                log(self.notes[-1])
        else:
            self.notes.append("zvf.aio.write_polylines is not in this checkout: "
                              "zvf's object rows read the reference-written streamline store")

        # the same bytes?  (zvf aims to write file-for-file what the reference writes)
        cmp = self.runner.run(w.compare_stores(sv.obstore(self.prefix["ref_points"], direct=True),
                                               sv.obstore(self.prefix["zvf_points"], direct=True)))
        self.build_info["points_identical"] = cmp
        if self.features["write_polylines"]:
            cmp2 = self.runner.run(w.compare_stores(sv.obstore(self.prefix["ref_lines"], direct=True),
                                                    sv.obstore(self.prefix["zvf_lines"], direct=True)))
            self.build_info["lines_identical"] = cmp2
        keys = self.runner.run(w.list_sizes(sv.obstore(self.prefix["ref_points"], direct=True)))
        self.point_keys = set(keys)
        self.point_bytes = keys
        self.line_keys = set(self.runner.run(w.list_sizes(sv.obstore(self.prefix["ref_lines"], direct=True))))
        log(f"points stores identical: {cmp['identical']} ({cmp['keys']} keys"
            + ("" if cmp["identical"] else f"; differ {cmp['n_differ']} e.g. {cmp['differ']}, "
               f"only ref {cmp['n_only_ref']} {cmp['only_ref']}, only zvf {cmp['n_only_zvf']} {cmp['only_zvf']}") + ")")

    @property
    def zvf_lines(self) -> str:
        return "zvf_lines" if self.features["write_polylines"] else "ref_lines"


# --------------------------------------------------------------------------------------
# rows
# --------------------------------------------------------------------------------------


class Bench:
    """The rows.  Each row has one measuring function per implementation; ``measure``
    runs them interleaved (ref, zvf, floor, ref, ...) ``reps`` times and keeps the median,
    so a burst of load on the machine does not land on one implementation only."""

    def __init__(self, wl: Workloads, results: Results, reps: dict[str, int]):
        self.wl = wl
        self.s = wl.servers
        self.res = results
        self.run = wl.runner.run
        self.reps = reps
        self.attr_names = sorted(wl.attrs)
        self._floor_stores: dict = {}

    def floor_store(self, prefix: str):
        """One S3Store per prefix for every floor row: a warm connection pool, as a floor should have."""
        if prefix not in self._floor_stores:
            self._floor_stores[prefix] = self.s.obstore(prefix)
            self.run(w.fetch_all(self._floor_stores[prefix], ["zarr.json"]))
        return self._floor_stores[prefix]

    def measure(self, row: str, lat: float, impls: dict) -> None:
        runs: dict[str, list[dict]] = {k: [] for k in impls}
        for _ in range(self.reps.get(row, 1)):
            for name, fn in impls.items():
                runs[name].append(fn())
        for name, rs in runs.items():
            rs = sorted(rs, key=lambda r: r["seconds"])
            mid = dict(rs[(len(rs) - 1) // 2])
            mid["ok"] = all(r.get("ok", True) is not False for r in rs)
            if len(rs) > 1:
                mid["all_seconds"] = [round(r["seconds"], 4) for r in runs[name]]
                mid["note"] = (mid.get("note", "") + f"; median of {len(rs)}").lstrip("; ")
            secs, counts = mid.pop("seconds"), mid.pop("counts")
            self.res.add(row, name, lat, secs, counts, **mid)

    # -- measuring helpers: each returns {"seconds", "counts", "ok", ...}
    def _sync(self, fn, check) -> dict:
        out, secs, c = timed_sync(self.s, fn)
        return {"seconds": secs, "counts": c, "ok": check(out)}

    def _zvf(self, name: str, work, check, *, timed_open: bool = False, warm=None) -> dict:
        """Open ``name`` with zvf, optionally warm it, then time ``work(ds)`` (and the open if asked)."""
        import zvf.aio

        async def go():
            url, opts = self.wl.url(name), self.s.zvf_options()
            if timed_open:
                async def both():
                    ds = await zvf.aio.open(url, storage_options=opts)
                    return ds, await work(ds)
                (ds, out), secs, c = await timed_async(self.s, both)
            else:
                ds = await zvf.aio.open(url, storage_options=opts)
                if warm is not None:
                    await warm(ds)
                ds.stats.reset()
                out, secs, c = await timed_async(self.s, lambda: work(ds))
            st = ds.stats.snapshot()
            await ds.close()
            return {"seconds": secs, "counts": c, "ok": check(out), "zvf_stats": st,
                    "note": f"zvf est. {st['round_trips']} RT"}

        return self.run(go())

    def _floor(self, prefix: str, waves, note: str) -> dict:
        """Fetch each wave of keys at once, waves one after another."""
        store = self.floor_store(prefix)

        async def go():
            for keys in waves:
                await w.fetch_all(store, keys)

        _, secs, c = self.run(timed_async(self.s, go))
        return {"seconds": secs, "counts": c, "ok": None, "note": note}

    # -- rows
    def row_open(self, lat: float) -> None:
        wl, s = self.wl, self.s
        lo, hi = wl.box8
        meta = w.point_meta_keys(self.attr_names)
        cells = w.point_cell_keys(w.chunk_range(wl.sizes, lo, hi), self.attr_names, wl.point_keys)
        self.measure("open", lat, {
            "ref": lambda: self._sync(
                lambda: ref.RefReader(wl.url("ref_points"), s.obstore_options()).query(lo, hi),
                lambda r: ref.n_vertices(r) == wl.truth_box8),
            "zvf": lambda: self._zvf("zvf_points", lambda ds: ds.query((lo, hi)),
                                     lambda sel: len(sel) == wl.truth_box8, timed_open=True),
            "floor": lambda: self._floor(wl.prefix["ref_points"], [meta, cells],
                                         f"{len(meta)} docs, then {len(cells)} cells"),
        })

    def row_queries(self, lat: float) -> None:
        wl, s = self.wl, self.s
        per = [w.point_cell_keys(w.chunk_range(wl.sizes, lo, hi), self.attr_names, wl.point_keys)
               for lo, hi in wl.boxes]

        def ref_fn():
            rr = ref.RefReader(wl.url("ref_points"), s.obstore_options())
            rr.query(*wl.boxes[0])  # warm what an opened dataset keeps warm
            return self._sync(lambda: [ref.n_vertices(rr.query(lo, hi)) for lo, hi in wl.boxes],
                              lambda got: got == wl.truth_boxes)

        async def zvf_work(ds):
            return [len(await ds.query(b)) for b in wl.boxes]

        self.measure("queries", lat, {
            "ref": ref_fn,
            "zvf": lambda: self._zvf("zvf_points", zvf_work, lambda got: got == wl.truth_boxes,
                                     warm=lambda ds: ds.query(wl.boxes[0])),
            "floor": lambda: self._floor(wl.prefix["ref_points"], per, "one concurrent wave per query"),
        })

    def _object_row(self, lat: float, row: str, ids: list[int], batch: bool) -> None:
        wl, s = self.wl, self.s
        want = int(wl.line_lengths[ids].sum())
        per = [w.object_cell_keys(wl.lines[i], wl.sizes, wl.line_keys) for i in ids]
        waves = [sorted({k for keys in per for k in keys})] if batch else per

        def ref_fn():
            rr = ref.RefReader(wl.url("ref_lines"), s.obstore_options())
            if batch:
                return self._sync(lambda: ref.n_vertices(rr.read_objects(ids)), lambda n: n == want)
            return self._sync(lambda: sum(ref.n_vertices(rr.read_object(i)) for i in ids), lambda n: n == want)

        async def zvf_work(ds):
            if batch:
                return w.n_vertices(await w.zvf_read_objects(ds, ids))
            return sum([w.n_vertices(await w.zvf_read_object(ds, i)) for i in ids])

        impls = {"ref": ref_fn}
        if wl.features["read_object"]:
            impls["zvf"] = lambda: self._zvf(wl.zvf_lines, zvf_work, lambda n: n == want)
            if wl.zvf_lines != "ref_lines" and not wl.build_info.get("lines_identical", {}).get("identical"):
                # zvf's own streamline store is laid out differently: also read the reference's
                impls["zvf@ref"] = lambda: self._zvf("ref_lines", zvf_work, lambda n: n == want)
        impls["floor"] = lambda: self._floor(wl.prefix["ref_lines"], waves,
                                             "vertex+fragment cells of the objects' chunks")
        self.measure(row, lat, impls)

    def row_object(self, lat: float) -> None:
        self._object_row(lat, "object", self.wl.oids[:1], batch=False)

    def row_objects(self, lat: float) -> None:
        self._object_row(lat, "objects", self.wl.oids, batch=False)

    def row_batch(self, lat: float) -> None:
        self._object_row(lat, "batch", self.wl.oids, batch=True)

    def row_export(self, lat: float) -> None:
        wl, s = self.wl, self.s
        n = len(wl.pos)
        keys = [k for k in sorted(wl.point_keys)
                if "/c/" in k and (k.startswith("0/vertices/") or k.startswith("0/vertex_attributes/"))]

        def ref_fn():
            rr = ref.RefReader(wl.url("ref_points"), s.obstore_options())
            return self._sync(lambda: ref.n_vertices(rr.export()), lambda got: got == n)

        async def zvf_work(ds):
            return len(await ds.read_all())

        self.measure("export", lat, {
            "ref": ref_fn,
            "zvf": lambda: self._zvf("zvf_points", zvf_work, lambda got: got == n),
            "floor": lambda: self._floor(wl.prefix["ref_points"], [keys],
                                         f"{len(keys)} cells at once (<= {w.FLOOR_CONCURRENCY} in flight)"),
        })

    def row_cross(self, lat: float) -> None:
        """Each implementation reads the other's store; the answers must be the same rows."""
        wl, s = self.wl, self.s
        lo, hi = wl.box8

        def rows(p) -> np.ndarray:
            p = np.asarray(p)
            return p[np.lexsort(p.T[::-1])]

        truth = rows(ref.RefReader(wl.url("ref_points"), s.obstore_options()).query(lo, hi).positions)

        def ref_fn():
            out = self._sync(lambda: ref.RefReader(wl.url("zvf_points"), s.obstore_options()).query(lo, hi),
                             lambda r: np.array_equal(rows(r.positions), truth))
            out["note"] = "reference opens zvf's points store + 8-chunk query"
            return out

        def zvf_fn():
            out = self._zvf("ref_points", lambda ds: ds.query((lo, hi)),
                            lambda sel: np.array_equal(rows(sel.positions), truth), timed_open=True)
            out["note"] = "zvf opens the reference's points store + 8-chunk query"
            if wl.features["read_object"]:
                oid = wl.oids[0]
                got = self._zvf("ref_lines", lambda ds: w.zvf_read_object(ds, oid),
                                lambda r: np.array_equal(np.asarray(getattr(r, "positions", r)), wl.lines[oid]))
                out["ok"] = out["ok"] and got["ok"]
                out["note"] += f"; object {oid} of the reference's streamline store equals the input"
            return out

        self.measure("cross", lat, {"ref": ref_fn, "zvf": zvf_fn})

    # -- child-process rows
    def row_ingest(self, lat: float, rss_cap_mib: float = 12 * 1024, timeout: float = 600) -> None:
        sz = self.wl.sizes
        s = self.s
        url = s.url("ingest/zvf.zarrvectors")
        s.set_latency(lat / 1000)
        for impl, cmd in (
            ("zvf", [sys.executable, str(HERE / "workloads.py"), "ingest-zvf", sz.name, url,
                     json.dumps(s.zvf_options())]),
            ("ref", [sys.executable, str(HERE / "reference.py"), "ingest", sz.name,
                     str(Path(tempfile.gettempdir()) / f"zvf-bench-ref-ingest-{os.getpid()}.zarrvectors")]),
        ):
            s.reset()
            t0 = time.perf_counter()
            out, killed = run_watched(cmd, rss_cap_mib, timeout)
            wall = time.perf_counter() - t0
            c = s.counts() if impl == "zvf" else None
            if out is None:
                self.res.add("ingest", impl, lat, wall, c, ok=False, note=f"stopped: {killed}")
                continue
            self.res.add("ingest", impl, lat, out["seconds"], c, ok=out["vertex_count"] == sz.ingest_points,
                         peak_rss_mib=out["peak_rss_mib"], base_rss_mib=out["base_rss_mib"],
                         note=f"peak RSS {out['peak_rss_mib']:.0f} MiB; {out['mode']}"
                              + (f", {fmt_bytes(c.get('bytes_in'))} uploaded to S3" if impl == "zvf" else
                                 f" ({fmt_bytes(out.get('bytes'))} written; the input array alone is "
                                 f"{sz.ingest_points * 12 / 2**20:.0f} MiB)"))
        s.set_latency(0)

    def row_coldstart(self, lat: float, reps: int) -> None:
        wl, s = self.wl, self.s
        if wl.features["read_object"]:
            what = {"kind": "object", "oid": wl.oids[0]}
            urls = {"ref": wl.url("ref_lines"), "zvf": wl.url(wl.zvf_lines)}
            want = int(wl.line_lengths[wl.oids[0]])
            note = "import, open, read 1 object"
        else:
            lo, hi = wl.box8
            what = {"kind": "bbox", "lo": lo, "hi": hi}
            urls = {"ref": wl.url("ref_points"), "zvf": wl.url("zvf_points")}
            want = wl.truth_box8
            note = "import, open, one 8-chunk bbox query (zvf has no read_object yet)"
        for impl in ("ref", "zvf"):
            code = COLDSTART[impl]
            opts = s.obstore_options() if impl == "ref" else s.zvf_options()
            walls, inner, ok, c = [], [], True, None
            for _ in range(reps):
                s.reset()
                t0 = time.perf_counter()
                p = subprocess.run([sys.executable, "-c", code, urls[impl], json.dumps(opts), json.dumps(what)],
                                   capture_output=True, text=True, timeout=300, cwd=tempfile.gettempdir())
                walls.append(time.perf_counter() - t0)
                c = s.counts()
                if p.returncode != 0:
                    ok = False
                    log(p.stderr[-2000:])
                    break
                out = json.loads(p.stdout.strip().splitlines()[-1])
                inner.append(out["inner_seconds"])
                ok = ok and out["vertices"] == want
            self.res.add("coldstart", impl, lat, statistics.median(walls), c, ok=ok,
                         inner_seconds=statistics.median(inner) if inner else None,
                         note=f"{note}; median of {len(walls)} new processes"
                              + (f", in-process part {statistics.median(inner):.3f} s" if inner else ""))


# What a new process runs: the same steps for both, and nothing imported that the step does not need.
COLDSTART = {
    "zvf": """
import time; t0 = time.perf_counter()
import asyncio, json, sys
import zvf.aio
url, opts, what = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
async def go():
    ds = await zvf.aio.open(url, storage_options=opts)
    if what["kind"] == "object":
        return len((await ds.read_object(int(what["oid"]))).positions)
    return len(await ds.query((what["lo"], what["hi"])))
n = asyncio.run(go())
print(json.dumps({"inner_seconds": time.perf_counter() - t0, "vertices": n}))
""",
    "ref": """
import time; t0 = time.perf_counter()
import json, sys
import zarr_vectors as zv
url, opts, what = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
ds = zv.open(url, storage=zv.StorageOptions(options=opts))
if what["kind"] == "object":
    n = ds.level(0).objects[int(what["oid"])].vertex_count
else:
    n = ds.level(0).select(bbox=(what["lo"], what["hi"])).read().vertex_count
print(json.dumps({"inner_seconds": time.perf_counter() - t0, "vertices": int(n)}))
""",
}


def run_watched(cmd: list[str], rss_cap_mib: float, timeout: float) -> tuple[dict | None, str]:
    """Run a child, killing it above ``rss_cap_mib`` resident or after ``timeout`` s."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reason = ""
    stop = threading.Event()

    def watch() -> None:
        nonlocal reason
        t0 = time.monotonic()
        while not stop.wait(0.2):
            try:
                status = Path(f"/proc/{p.pid}/status").read_text()
                rss = int(next(x for x in status.splitlines() if x.startswith("VmRSS")).split()[1]) / 1024
            except (OSError, StopIteration):
                rss = 0
            if rss > rss_cap_mib or time.monotonic() - t0 > timeout:
                reason = f"RSS {rss:.0f} MiB > cap {rss_cap_mib:.0f}" if rss > rss_cap_mib else f"timeout {timeout} s"
                p.kill()
                return

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    out, err = p.communicate()
    stop.set()
    t.join()
    if p.returncode != 0:
        log(err[-3000:])
        return None, reason or f"exit {p.returncode}"
    return json.loads(out.strip().splitlines()[-1]), ""


# --------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------


def fmt_bytes(n) -> str:
    if n in (None, ""):
        return "-"
    n = float(n)
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def delta_rt(results: Results, rec: dict) -> float | None:
    """Round trips the latency added: (t(L) - t(0 ms)) / L for the same row and implementation.

    moto serves ~400 requests/s one after another, so a row's wall time also
    holds requests x ~2.5 ms of server time; subtracting the 0 ms run leaves
    the sequential round trips the latency actually cost.
    """
    lat = rec["latency_ms"]
    base = results.get(rec["row"], rec["impl"], 0.0)
    if not lat or base is None or rec["row"] in ("ingest",):
        return None
    return (rec["seconds"] - base["seconds"]) / (lat / 1000)


def table(results: Results, sizes: w.Sizes) -> list[list[str]]:
    header = ["row", "latency", "impl", "time s", "RT", "ΔRT", "GETs", "404", "LIST", "other", "bytes", "ref/impl",
              "check", "note"]
    out = [header]
    order = {k: i for i, k in enumerate(ROWS)}
    groups: dict[tuple, list[dict]] = {}
    for r in results.rows:
        groups.setdefault((order[r["row"]], r["latency_ms"] if r["row"] != "ingest" else -1, r["row"]), []).append(r)
    n_for = {"queries": sizes.n_queries, "objects": sizes.n_objects, "batch": sizes.n_objects,
             "export": sizes.n_points, "ingest": sizes.ingest_points}
    for (_, _, row), recs in sorted(groups.items()):
        title = ROW_TITLES[row].format(n=n_for.get(row, 0))
        ref_rec = next((r for r in recs if r["impl"] == "ref"), None)
        for i, r in enumerate(sorted(recs, key=lambda r: ("ref", "zvf", "zvf@ref", "floor").index(r["impl"]))):
            c = r["counts"]
            lat = r["latency_ms"]
            other = sum(c.get(k, 0) for k in ("HEAD", "PUT", "POST", "DELETE")) if c else None
            ratio = ""
            if ref_rec is not None and r is not ref_rec and r["seconds"] > 0 and row not in ("cross",):
                ratio = f"{ref_rec['seconds'] / r['seconds']:.1f}x"
            out.append([
                title if i == 0 else "",
                f"{lat:.0f} ms" if i == 0 else "",
                r["impl"],
                f"{r['seconds']:.3f}",
                f"{r['seconds'] / (lat / 1000):.1f}" if lat else "-",
                f"{d:.1f}" if (d := delta_rt(results, r)) is not None else "-",
                str(c.get("GET", "-")) if c else "-",
                str(c.get("404", "-")) if c else "-",
                str(c.get("LIST", "-")) if c else "-",
                str(other) if other is not None else "-",
                fmt_bytes(c.get("bytes")) if c else "-",
                ratio,
                {True: "ok", False: "FAIL", None: ""}[r["ok"]],
                r["note"],
            ])
    return out


def render_text(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for k, r in enumerate(rows):
        cells = [r[i].ljust(widths[i]) if i < 3 else r[i].rjust(widths[i]) for i in range(len(widths))]
        lines.append("  ".join(cells) + "  " + r[-1])
        if k == 0:
            lines.append("-" * (sum(widths) + 2 * len(widths) + 4))
    return "\n".join(lines)


def render_markdown(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "|".join("---" for _ in rows[0]) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in rows[1:]]
    return "\n".join(lines)


def targets(results: Results, lat_hi: float) -> list[tuple[str, str, str]]:
    """(target, verdict, numbers) for each target of the issue (measured, not asserted).

    Round-trip targets get two verdicts: by wall time / latency (literal, and
    out of reach for any client here because moto adds ~2.5 ms per request
    one request after another) and by ΔRT, the round trips the latency added.
    """
    out = []

    def g(row, impl, lat=lat_hi):
        return results.get(row, impl, lat)

    def rt(rec):
        return rec["seconds"] / (rec["latency_ms"] / 1000)

    def drt(rec):
        d = delta_rt(results, rec)
        return "n/a" if d is None else f"{d:.1f}"

    def verdict(cond):
        return "n/a" if cond is None else ("MET" if cond else "MISSED")

    def add(name, cond, numbers, extra_verdict=None):
        v = verdict(cond)
        if extra_verdict is not None:
            v = f"{v} by wall, {verdict(extra_verdict)} by ΔRT"
        out.append((name, v, numbers))

    def reqs(rec):
        c = rec["counts"]
        return f"{c.get('GET')}" + (f"+{c['LIST']} LIST" if c.get("LIST") else "")

    L = f"{lat_hi:.0f} ms"
    for row, what in (("open", "open + one 8-chunk bbox query"), ("object", "1 object read after open")):
        r, z, f = g(row, "ref"), g(row, "zvf"), g(row, "floor")
        if not (r and f) or not lat_hi:
            continue
        if not z:
            add(f"{what} <= 3 RT at {L}", None, "zvf has no such read in this checkout")
            continue
        d = delta_rt(results, z)
        add(f"{what} <= 3 RT at {L}", rt(z) <= 3,
            f"wall/latency: zvf {rt(z):.1f}, ref {rt(r):.1f}, floor {rt(f):.1f}; "
            f"ΔRT: zvf {drt(z)}, ref {drt(r)}, floor {drt(f)}; "
            f"GETs: zvf {reqs(z)}, ref {reqs(r)}, floor {reqs(f)}",
            extra_verdict=None if d is None else d <= 3.0)
    for row, need in (("queries", 5), ("objects", 5), ("batch", 2)):
        r, z, f = g(row, "ref"), g(row, "zvf"), g(row, "floor")
        if r is None:
            continue
        ceiling = f"; the floor itself is {r['seconds'] / f['seconds']:.1f}x" if f else ""
        add(f"{row}: zvf >= {need}x faster than the reference at {L}",
            None if not z else r["seconds"] / z["seconds"] >= need,
            "zvf has no object reads in this checkout" if not z
            else f"ref {r['seconds']:.2f} s, zvf {z['seconds']:.2f} s: {r['seconds'] / z['seconds']:.1f}x{ceiling}")
    for lat in sorted({x["latency_ms"] for x in results.rows if x["row"] == "export"}):
        z, f = results.get("export", "zvf", lat), results.get("export", "floor", lat)
        if z and f:
            n_get = f["counts"].get("GET", 0)
            add(f"export >= 80% of the floor's throughput at {lat:.0f} ms", f["seconds"] / z["seconds"] >= 0.8,
                f"zvf {z['seconds']:.2f} s, floor {f['seconds']:.2f} s: {100 * f['seconds'] / z['seconds']:.0f}%; "
                f"the floor runs at {n_get / f['seconds']:.0f} GETs/s, "
                f"{f['counts'].get('bytes', 0) / 1e6 / f['seconds']:.1f} MB/s (moto's cap)")
    z = next((x for x in results.rows if x["row"] == "ingest" and x["impl"] == "zvf"), None)
    r = next((x for x in results.rows if x["row"] == "ingest" and x["impl"] == "ref"), None)
    if z:
        add("ingest peak RSS < 1 GiB", z.get("peak_rss_mib") is not None and z["peak_rss_mib"] < 1024,
            f"zvf {z.get('peak_rss_mib') or 0:.0f} MiB in {z['seconds']:.1f} s ({z['note'].split('; ', 1)[-1]})"
            + (f"; ref {r.get('peak_rss_mib') or 0:.0f} MiB in {r['seconds']:.1f} s" if r else ""))
    r, z = g("coldstart", "ref"), g("coldstart", "zvf")
    if r and z:
        add(f"cold start <= 1/2 of the reference's at {L}", z["seconds"] <= 0.5 * r["seconds"],
            f"zvf {z['seconds']:.2f} s, ref {r['seconds']:.2f} s: {z['seconds'] / r['seconds']:.2f} "
            f"(in-process part: zvf {z.get('inner_seconds') or 0:.2f} s, ref {r.get('inner_seconds') or 0:.2f} s)")
    return out


def machine_note() -> str:
    cpu = ""
    with contextlib.suppress(OSError, StopIteration):
        cpu = next(x.split(":", 1)[1].strip() for x in Path("/proc/cpuinfo").read_text().splitlines()
                   if x.startswith("model name"))
    mem = ""
    try:
        kb = int(next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemTotal")).split()[1])
        mem = f"{kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, StopIteration):
        pass
    return (f"{os.cpu_count()} cores {cpu}, {mem}, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def versions() -> str:
    from importlib.metadata import version

    out = []
    for pkg in ("zvf", "zarr-vectors", "zarr", "obstore", "moto", "numpy"):
        try:
            out.append(f"{pkg} {version(pkg)}")
        except Exception:
            out.append(f"{pkg} ?")
    return ", ".join(out)


# --------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------


#: The other benchmark scripts of this folder, each measuring its rows side by side in one run:
#: name -> (full-size arguments, --quick arguments).  ``--suites`` runs them after the rows above.
SUITES = {
    "write": ([], ["--quick", "--reps", "1"]),
    "read_objects": ([], ["--rows", "local", "--lines", "20000", "--reps", "1"]),
    "select_queries": ([], ["--quick"]),
    "stream_objects": ([], ["--streamlines", "5000", "--big", "20000"]),
    "pyramid": ([], ["--points", "1e5", "--streamlines", "2e3"]),
    "convert": ([], ["--quick"]),
    "dask_engine": ([], ["--points", "2e5", "--files", "4"]),
    "dask_pyramid": ([], ["--points", "1e5", "--streamlines", "0", "--reps", "1"]),
}


def run_suites(names: list[str], quick: bool) -> list[str]:
    """Run the named scripts one after another (their tables go to stdout); the names that failed."""
    failed = []
    for name in names:
        full, small = SUITES[name]
        cmd = [sys.executable, str(Path(__file__).with_name(f"{name}.py")), *(small if quick else full)]
        print(f"\n== {' '.join(['python', f'benchmarks/{name}.py', *cmd[2:]])}", flush=True)
        if subprocess.run(cmd).returncode:
            failed.append(name)
    return failed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny workloads (smoke test)")
    ap.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated subset of {','.join(ROWS)}")
    ap.add_argument("--latency", default="0,20", help="proxy latencies in ms (default 0,20)")
    ap.add_argument("--coldstart-reps", type=int, default=None, help="new processes per cold-start row (median)")
    ap.add_argument("--reps", type=int, default=None,
                    help="repetitions of every in-process row (median kept); default: 1 with --quick, else "
                         + ", ".join(f"{k} {v}" for k, v in FULL_REPS.items()))
    ap.add_argument("--json", help="write every measurement to this JSON file")
    ap.add_argument("--markdown", help="write the table and targets as markdown to this file")
    ap.add_argument("--suites", default="", help=f"then run these scripts too ('all' or a subset of "
                                                 f"{','.join(SUITES)}; with --quick at small sizes)")
    args = ap.parse_args(argv)
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    bad = [r for r in rows if r not in ROWS]
    if bad:
        ap.error(f"unknown rows {bad}; choose from {ROWS}")
    suites = list(SUITES) if args.suites == "all" else [x.strip() for x in args.suites.split(",") if x.strip()]
    if [x for x in suites if x not in SUITES]:
        ap.error(f"unknown suites {[x for x in suites if x not in SUITES]}; choose from {list(SUITES)} or all")
    lats = [float(x) for x in args.latency.split(",")]
    sizes = w.QUICK if args.quick else w.FULL
    reps = args.coldstart_reps or (1 if args.quick else 5)
    row_reps = {} if args.quick else dict(FULL_REPS)
    if args.reps is not None:
        row_reps = {r: args.reps for r in ROWS}
    load_before = os.getloadavg()
    cmd = "python benchmarks/run.py " + " ".join(argv if argv is not None else sys.argv[1:])
    started = dt.datetime.now()
    t_start = time.perf_counter()

    features = w.zvf_features()
    log(f"zvf features: {features}")
    servers = w.Servers()
    results = Results()
    try:
        with asyncio.Runner() as runner:
            wl = Workloads(sizes, servers, runner, features)
            wl.build()
            bench = Bench(wl, results, row_reps)
            for lat in lats:
                servers.set_latency(lat / 1000)
                log(f"-- latency {lat:.0f} ms")
                for row in rows:
                    if row in ("ingest", "coldstart") or (row == "cross" and lat != lats[0]):
                        continue
                    getattr(bench, f"row_{row}")(lat)
                if "coldstart" in rows:
                    bench.row_coldstart(lat, reps)
            servers.set_latency(0)
            if "ingest" in rows:
                log("-- ingest")
                bench.row_ingest(0)
    finally:
        servers.stop()

    elapsed = time.perf_counter() - t_start
    tab = table(results, sizes)
    tg = targets(results, max(lats))
    info = wl.build_info
    head = [
        f"zvf benchmark ({sizes.name} sizes) -- {started:%Y-%m-%d %H:%M}, {elapsed:.0f} s total",
        f"command: {cmd}",
        f"machine: {machine_note()}; load average {load_before[0]:.1f} at start, "
        f"{os.getloadavg()[0]:.1f} at end",
        f"versions: {versions()}",
        f"workload: {sizes.n_points:,} points in {sizes.grid ** 3} chunks of {sizes.chunk:g} "
        f"({sizes.bins_per_axis ** 3} bins each, 1 float32 attribute); {sizes.n_lines:,} streamlines, "
        f"{int(wl.line_lengths.sum()):,} vertices; zvf features {features}",
        f"stores: points written by both are byte-identical: {info['points_identical']['identical']}"
        + (f"; streamlines: {info['lines_identical']['identical']}" if "lines_identical" in info else ""),
    ] + [f"note: {n}" for n in wl.notes]
    print("\n".join(head))
    print()
    print(render_text(tab))
    if any(r["impl"] == "zvf@ref" for r in results.rows):
        print("zvf@ref: zvf reading the reference-written streamline store (zvf's own is laid out differently)")
    print()
    print("targets (measured, not asserted):")
    for name, verdict, numbers in tg:
        print(f"  [{verdict}] {name}: {numbers}")
    failed = [r for r in results.rows if r["ok"] is False]
    if failed:
        print(f"CHECK FAILURES: {[(r['row'], r['impl'], r['latency_ms']) for r in failed]}")
    if args.json:
        Path(args.json).write_text(json.dumps({"head": head, "rows": results.rows, "targets": tg,
                                               "build": info}, indent=1, default=str))
    if args.markdown:
        md = ["```", *head, "```", "", render_markdown(tab), "", "Targets (measured, not asserted):", ""]
        md += [f"* **{v}** {n}: {x}" for n, v, x in tg]
        Path(args.markdown).write_text("\n".join(md) + "\n")
    broken = run_suites(suites, args.quick)
    if broken:
        print(f"SUITES FAILED: {broken}")
    return 1 if failed or broken else 0


if __name__ == "__main__":
    sys.exit(main())
