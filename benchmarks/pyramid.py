"""Pyramid build on the in-process S3 server: wall time and peak memory of the build.

    .venv/bin/python benchmarks/pyramid.py                      # 10 M points, 200 k streamlines
    .venv/bin/python benchmarks/pyramid.py --points 1e6 --streamlines 2e4   # a smaller run
    .venv/bin/python benchmarks/pyramid.py --points 0 --streamlines 0 --las-points 2e6   # LAS, 17 attributes
    .venv/bin/python benchmarks/pyramid.py --local /tmp/pyr ...   # stores in a local directory instead

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


def points_store(url: str, opts: dict | None, n: int) -> None:
    import zvf

    rng = np.random.default_rng(0)
    extent = float(np.ceil(100.0 * max(1.0, (n / 1e4) ** (1 / 3))))  # ~10 k points per 100-unit chunk
    batches = ({"positions": rng.uniform(0, extent, (min(1_000_000, n - i), 3)).astype(np.float32)}
               for i in range(0, n, 1_000_000))
    zvf.write_points(url, batches, chunk_shape=(100.0,) * 3, bin_shape=(50.0,) * 3,
                     bounds=([0.0] * 3, [extent] * 3), storage_options=opts)


def streamlines_store(url: str, opts: dict | None, n: int, per: int) -> None:
    import zvf

    rng = np.random.default_rng(1)
    extent = float(np.ceil(100.0 * max(2.0, (n * per / 1e4) ** (1 / 3))))  # ~10 k vertices per 100-unit chunk
    starts = rng.uniform(100, extent - 100, (n, 1, 3))
    steps = rng.normal(0, 2.0, (n, per, 3)).cumsum(axis=1)
    lines = list(np.clip(starts + steps, 0, extent).astype(np.float32))
    del starts, steps
    zvf.write_polylines(url, lines, geometry_type="streamline", chunk_shape=(100.0,) * 3, bin_shape=(50.0,) * 3,
                        bounds=([0.0] * 3, [extent] * 3), storage_options=opts)


def las_store(url: str, opts: dict | None, n: int) -> None:
    """An aerial-lidar-like LAS (1 km x 1 km of terrain; point format 3 and one extra-bytes float: 17
    attributes) converted as ``zvf convert`` does it: chunk_shape "auto"."""
    import tempfile

    import laspy

    import zvf

    rng = np.random.default_rng(2)
    header = laspy.LasHeader(point_format=3, version="1.2")
    header.add_extra_dim(laspy.ExtraBytesParams(name="amplitude", type=np.float32))
    header.scales, header.offsets = np.array([0.01, 0.01, 0.01]), np.array([500000.0, 4100000.0, 0.0])
    las = laspy.LasData(header)
    x, y = rng.uniform(0, 1000, n), rng.uniform(0, 1000, n)
    las.x, las.y = x + 500000, y + 4100000
    las.z = 50 + 20 * np.sin(x / 150) * np.cos(y / 200) + rng.normal(0, 0.5, n)
    las.intensity = rng.integers(0, 65535, n).astype(np.uint16)
    las.return_number, las.number_of_returns = rng.integers(1, 4, n).astype(np.uint8), np.full(n, 3, np.uint8)
    las.classification = rng.integers(0, 12, n).astype(np.uint8)
    las.gps_time = np.sort(rng.random(n)) * 1e5
    las.point_source_id = rng.integers(0, 20, n).astype(np.uint16)
    las.scan_angle_rank = rng.integers(-20, 20, n).astype(np.int8)
    las.red, las.green, las.blue = (rng.integers(0, 65535, n).astype(np.uint16) for _ in range(3))
    las.amplitude = rng.random(n).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        las.write(f"{tmp}/in.las")
        del las, x, y
        zvf.convert(f"{tmp}/in.las", url, storage_options=opts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", type=float, default=10e6)
    ap.add_argument("--streamlines", type=float, default=200e3)
    ap.add_argument("--vertices-per-streamline", type=int, default=50)
    ap.add_argument("--las-points", type=float, default=0, help="also a LAS file of this many points, converted")
    ap.add_argument("--local", metavar="DIR", help="stores in this (new) local directory instead of moto S3")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)
    from zvf.testing import EmbeddedS3

    s3 = None if args.local else EmbeddedS3.start()
    results = {}
    try:
        for name, size, make, factors in (
            ("points", args.points, lambda u, o: points_store(u, o, int(args.points)), [(2, 1), (2, 1)]),
            ("streamlines", args.streamlines,
             lambda u, o: streamlines_store(u, o, int(args.streamlines), args.vertices_per_streamline),
             [(2, 1), (2, 2)]),
            ("las", args.las_points, lambda u, o: las_store(u, o, int(args.las_points)), [(2, 1), (2, 1)]),
        ):
            if size <= 0:
                continue
            if s3 is None:
                url, opts = f"{args.local}/{name}", {}
            else:
                url, opts = f"s3://{s3.create_bucket()}/{name}", s3.storage_options()
            t0 = time.perf_counter()
            make(url, opts)
            write_s = time.perf_counter() - t0
            res = build(url, opts, factors)
            res["write_seconds"] = write_s
            results[name] = res
            lv = ", ".join(f"L{x['level']} {x['vertex_count']:,} v" for x in res["levels"])
            print(f"{name:12} build {res['seconds']:7.1f} s  peak RSS {res['peak_rss_mib']:7.1f} MiB  "
                  f"{res['requests']['requests']:,} GET/LIST, {res['requests']['puts']:,} PUT  ({lv}; "
                  f"input write {write_s:.1f} s)", flush=True)
    finally:
        if s3 is not None:
            s3.stop()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    return 0 if all(r["peak_rss_mib"] < 1024 for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
