"""Composable queries, zvf vs zarr-vectors 0.9.2, on S3 (moto) behind a latency proxy.

(Not ``select.py``: in this directory that name would shadow the stdlib ``select`` module for every
benchmark script and its child processes.)

    .venv/bin/python benchmarks/select_queries.py              # 1 M points, 20,000 streamlines, 20 ms
    .venv/bin/python benchmarks/select_queries.py --quick      # small sizes (~30 s)

Rows (both implementations read the same reference-written stores, cold, each
from a freshly opened dataset; time excludes opening):

* ``where + box``: a box of 4x4x4 chunks and ``cls == 2`` (ground points: a
  class that follows the terrain, so it is spatially coherent like LiDAR
  classes).  0.9.2's ``select(where=...)`` needs a store chunked by that
  attribute, so its row is ``select(bbox=...).read()`` filtered in numpy, the
  way its users answer this question on an ordinary store.
* ``near``: streamline vertices within a ball (``clip=True`` in zvf, the
  semantics of 0.9.2's ``select(near=...)``).

Requests and bytes come from the proxy; the result sizes are checked
against numpy truth.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import numpy as np  # noqa: E402 - after the sys.path setup
import reference as ref  # noqa: E402 - after the sys.path setup
import workloads as w  # noqa: E402 - after the sys.path setup


def ground_class(pos: np.ndarray, sizes: w.Sizes) -> np.ndarray:
    """2 (ground) below a wavy terrain surface, 1 above: a class coherent in space."""
    e = sizes.extent
    surface = 0.3 * e + 0.08 * e * np.sin(pos[:, 0] / (0.15 * e)) * np.cos(pos[:, 1] / (0.2 * e))
    return np.where(pos[:, 2] < surface, 2, 1).astype(np.uint8)


def build(sizes: w.Sizes, servers: w.Servers, runner) -> dict:
    pos, attrs = w.make_points(sizes)
    attrs["cls"] = ground_class(pos, sizes)
    lines = w.make_streamlines(sizes)
    with tempfile.TemporaryDirectory(prefix="zvf-select-") as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        ref.write_points_local(tmp / "points.zarrvectors", sizes, pos, attrs)
        ref.write_streamlines_local(tmp / "streamlines.zarrvectors", sizes, lines)
        runner.run(w.upload_dir(servers.obstore("sel/points.zarrvectors", direct=True), tmp / "points.zarrvectors"))
        runner.run(w.upload_dir(servers.obstore("sel/lines.zarrvectors", direct=True),
                                tmp / "streamlines.zarrvectors"))
        print(f"built and uploaded the stores in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return {"pos": pos, "attrs": attrs, "lines": lines}


def timed(servers: w.Servers, fn):
    servers.reset()
    t0 = time.perf_counter()
    out = fn()
    secs = time.perf_counter() - t0
    return out, secs, servers.counts()


def run(sizes: w.Sizes, latency_ms: float) -> list[dict]:
    import zvf

    servers = w.Servers()
    rows = []
    try:
        with asyncio.Runner() as runner:
            data = build(sizes, servers, runner)
        pos, cls = data["pos"], data["attrs"]["cls"]
        c = sizes.chunk
        box = ([1.5 * c, 1.5 * c, 0.5 * c], [5.5 * c, 5.5 * c, 4.5 * c])
        inb = np.all((pos >= box[0]) & (pos <= box[1]), axis=1)
        truth_where = int((inb & (cls == 2)).sum())
        allv = np.concatenate(data["lines"]).astype(np.float64)
        center, radius = [0.5 * sizes.extent] * 3, 0.6 * c
        truth_near = int((((allv - center) ** 2).sum(1) <= radius ** 2).sum())
        servers.set_latency(latency_ms / 1000.0)
        pts_url, lines_url = servers.url("sel/points.zarrvectors"), servers.url("sel/lines.zarrvectors")

        # ---- where + box
        r = ref.RefReader(pts_url, servers.obstore_options())
        r.ds.level(0)

        def ref_where():
            res = r.ds.level(0).select(bbox=box).read()
            keep = np.asarray(res.attributes["cls"]) == 2
            return int(keep.sum())

        n, secs, cnt = timed(servers, ref_where)
        rows.append(row("where + box", "zarr-vectors 0.9.2", n, truth_where, secs, cnt))
        with zvf.open(pts_url, storage_options=servers.zvf_options()) as ds:
            sel, secs, cnt = timed(servers, ds.select(bbox=box, where={"cls": 2}).read)
        with zvf.open(pts_url, storage_options=servers.zvf_options()) as ds:  # the plan of a cold read
            rows.append(row("where + box", "zvf", len(sel), truth_where, secs, cnt,
                            ds.select(bbox=box, where={"cls": 2}).plan()))

        # ---- near on streamlines
        r = ref.RefReader(lines_url, servers.obstore_options())
        r.ds.level(0)
        res, secs, cnt = timed(servers, lambda: r.ds.level(0).select(near=(center, radius)).read())
        rows.append(row("near (streamlines)", "zarr-vectors 0.9.2", ref.n_vertices(res), truth_near, secs, cnt))
        with zvf.open(lines_url, storage_options=servers.zvf_options()) as ds:
            sel, secs, cnt = timed(servers, ds.select(near=(center, radius), clip=True).read)
        with zvf.open(lines_url, storage_options=servers.zvf_options()) as ds:
            rows.append(row("near (streamlines)", "zvf", len(sel), truth_near, secs, cnt,
                            ds.select(near=(center, radius), clip=True).plan()))
    finally:
        servers.stop()
    return rows


def row(name, impl, n, truth, secs, cnt, plan=None) -> dict:
    out = {"row": name, "impl": impl, "vertices": int(n), "truth": truth, "correct": int(n) == truth,
           "seconds": round(secs, 4), "requests": cnt["requests"], "bytes": cnt["bytes"]}
    if plan is not None:
        out["planned_requests"], out["planned_round_trips"] = plan.requests, plan.round_trips
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--latency", type=float, default=20.0, help="ms added to every request (default 20)")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args(argv)
    sizes = w.QUICK if args.quick else w.FULL
    rows = run(sizes, args.latency)
    print(f"{'row':20} {'impl':20} {'vertices':>9} {'ok':>3} {'time ms':>9} {'requests':>9} {'bytes':>12} "
          f"{'planned req/rt':>15}")
    for r in rows:
        planned = f"{r['planned_requests']}/{r['planned_round_trips']}" if "planned_requests" in r else ""
        print(f"{r['row']:20} {r['impl']:20} {r['vertices']:9,} {'yes' if r['correct'] else 'NO':>3} "
              f"{r['seconds'] * 1000:9.1f} {r['requests']:9,} {r['bytes']:12,} {planned:>15}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    ok = True
    for name in ("where + box", "near (streamlines)"):
        a, b = (next(r for r in rows if r["row"] == name and r["impl"] == i) for i in ("zarr-vectors 0.9.2", "zvf"))
        win = b["bytes"] < a["bytes"] and b["seconds"] < a["seconds"] and b["correct"]
        ok &= win
        print(f"{name}: zvf reads {a['bytes'] / max(b['bytes'], 1):.1f}x fewer bytes, "
              f"{a['seconds'] / max(b['seconds'], 1e-9):.1f}x faster -> {'OK' if win else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
