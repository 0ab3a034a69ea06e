"""Pyramid build on the in-process S3 server: wall time and peak memory of the build.

    .venv/bin/python benchmarks/pyramid.py                      # 10 M points, 200 k streamlines
    .venv/bin/python benchmarks/pyramid.py --points 1e6 --streamlines 2e4   # a smaller run

The parent starts zvf.testing.EmbeddedS3 (moto, in this process), writes each
input store, then runs ``zvf.build_pyramid`` in a child process against it.
moto keeps every object in the parent's memory and the input arrays live there
too, so the build's peak is the child's ``VmHWM`` (/proc/self/status), not its
``ru_maxrss``: Linux carries the parent's RSS at fork/vfork time into the
child's ``ru_maxrss`` across exec (a trivial child of a 400 MB parent reports
~400 MB there, ~9 MB in VmHWM).  The target: peak RSS of the build under 1 GiB.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np

CHILD = """
import json, sys, time, zvf
url, opts, factors = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
t0 = time.perf_counter()
summary = zvf.build_pyramid(url, [tuple(f) for f in factors], storage_options=opts)
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))  # kB, this process only
print(json.dumps({"seconds": time.perf_counter() - t0, "peak_rss_mib": hwm / 1024,
                  "levels": summary["levels"], "requests": summary["requests"]}))
"""


def build(url: str, opts: dict, factors) -> dict:
    p = subprocess.run([sys.executable, "-c", CHILD, url, json.dumps(opts), json.dumps(factors)],
                       capture_output=True, text=True, check=False)
    if p.returncode:
        raise SystemExit(f"pyramid build failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def points_store(s3, n: int) -> tuple[str, dict]:
    import zvf

    url, opts = f"s3://{s3.create_bucket()}/points", s3.storage_options()
    rng = np.random.default_rng(0)
    extent = float(np.ceil(100.0 * max(1.0, (n / 1e4) ** (1 / 3))))  # ~10 k points per 100-unit chunk
    batches = ({"positions": rng.uniform(0, extent, (min(1_000_000, n - i), 3)).astype(np.float32)}
               for i in range(0, n, 1_000_000))
    zvf.write_points(url, batches, chunk_shape=(100.0,) * 3, bin_shape=(50.0,) * 3,
                     bounds=([0.0] * 3, [extent] * 3), storage_options=opts)
    return url, opts


def streamlines_store(s3, n: int, per: int) -> tuple[str, dict]:
    import zvf

    url, opts = f"s3://{s3.create_bucket()}/streamlines", s3.storage_options()
    rng = np.random.default_rng(1)
    extent = float(np.ceil(100.0 * max(2.0, (n * per / 1e4) ** (1 / 3))))  # ~10 k vertices per 100-unit chunk
    starts = rng.uniform(100, extent - 100, (n, 1, 3))
    steps = rng.normal(0, 2.0, (n, per, 3)).cumsum(axis=1)
    lines = list(np.clip(starts + steps, 0, extent).astype(np.float32))
    del starts, steps
    zvf.write_polylines(url, lines, geometry_type="streamline", chunk_shape=(100.0,) * 3, bin_shape=(50.0,) * 3,
                        bounds=([0.0] * 3, [extent] * 3), storage_options=opts)
    return url, opts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", type=float, default=10e6)
    ap.add_argument("--streamlines", type=float, default=200e3)
    ap.add_argument("--vertices-per-streamline", type=int, default=50)
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)
    from zvf.testing import EmbeddedS3

    s3 = EmbeddedS3.start()
    results = {}
    try:
        for name, make, factors in (
            ("points", lambda: points_store(s3, int(args.points)), [(2, 1), (2, 1)]),
            ("streamlines", lambda: streamlines_store(s3, int(args.streamlines), args.vertices_per_streamline),
             [(2, 1), (2, 2)]),
        ):
            if (args.points if name == "points" else args.streamlines) <= 0:
                continue
            t0 = time.perf_counter()
            url, opts = make()
            write_s = time.perf_counter() - t0
            res = build(url, opts, factors)
            res["write_seconds"] = write_s
            results[name] = res
            lv = ", ".join(f"L{x['level']} {x['vertex_count']:,} v" for x in res["levels"])
            print(f"{name:12} build {res['seconds']:7.1f} s  peak RSS {res['peak_rss_mib']:7.1f} MiB  "
                  f"{res['requests']['requests']:,} GET/LIST, {res['requests']['puts']:,} PUT  ({lv}; "
                  f"input write {write_s:.1f} s)", flush=True)
    finally:
        s3.stop()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    return 0 if all(r["peak_rss_mib"] < 1024 for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
