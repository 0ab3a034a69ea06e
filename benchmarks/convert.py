"""Peak memory of large conversions: LAS -> ZVF -> LAZ and TRK -> ZVF -> TRK.

Each step runs in a fresh subprocess that reports its own peak RSS (``ru_maxrss``), so the
numbers are the conversion's alone (the generator runs in its own process too).  The LAS
side streams (laspy chunk iterator in, ``iter_chunks`` out): its peak stays near the spill
and chunk buffers whatever the file size.  The TRK side hands batches of streamlines to the
streaming polyline writer (``zvf.converters.base.write_batches``), so its peak is bounded too.

    .venv/bin/python benchmarks/convert.py --las-points 10000000 --streamlines 200000
    .venv/bin/python benchmarks/convert.py --quick
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def make_las(path: str, n: int, batch: int = 1_000_000) -> None:
    """A LAS 1.4 point format 6 file of ``n`` points with an extra-bytes float, written in batches."""
    import laspy

    rng = np.random.default_rng(0)
    header = laspy.LasHeader(point_format=6, version="1.4")
    header.add_extra_dim(laspy.ExtraBytesParams(name="temperature", type=np.float32))
    header.scales = np.array([0.001, 0.001, 0.001])
    header.offsets = np.array([0.0, 0.0, 0.0])
    with laspy.open(path, mode="w", header=header) as w:
        for lo in range(0, n, batch):
            k = min(batch, n - lo)
            rec = laspy.ScaleAwarePointRecord.zeros(k, header=header)
            rec.X = rng.integers(0, 1_000_000, k)
            rec.Y = rng.integers(0, 1_000_000, k)
            rec.Z = rng.integers(0, 100_000, k)
            rec.intensity = rng.integers(0, 65535, k)
            rec.classification = rng.integers(0, 20, k)
            rec.gps_time = rng.random(k) * 1e6
            rec.temperature = rng.random(k).astype(np.float32)
            w.write_points(rec)


def make_trk(path: str, n: int) -> None:
    """``n`` random-walk streamlines of 20-80 points with one per-point scalar."""
    import nibabel as nib
    from nibabel.streamlines import ArraySequence, Tractogram

    rng = np.random.default_rng(1)
    lens = rng.integers(20, 80, n)
    data = (np.cumsum(rng.normal(scale=0.5, size=(int(lens.sum()), 3)), axis=0) % 100).astype(np.float32)
    seq = ArraySequence()
    seq._data, seq._offsets, seq._lengths = data, np.concatenate([[0], np.cumsum(lens)[:-1]]), lens
    fa = ArraySequence()
    fa._data, fa._offsets, fa._lengths = rng.random((len(data), 1)).astype(np.float32), seq._offsets, lens
    hdr = {nib.streamlines.Field.VOXEL_TO_RASMM: np.eye(4),
           nib.streamlines.Field.DIMENSIONS: np.array([100, 100, 100], np.int16),
           nib.streamlines.Field.VOXEL_SIZES: np.ones(3, np.float32), nib.streamlines.Field.VOXEL_ORDER: "RAS"}
    nib.streamlines.save(Tractogram(seq, data_per_point={"fa": fa}, affine_to_rasmm=np.eye(4)), path, header=hdr)


def worker(args: list[str]) -> None:
    """One measured step: ``make-las|make-trk PATH N`` or ``convert SRC DST``."""
    t0 = time.perf_counter()
    if args[0] == "make-las":
        make_las(args[1], int(args[2]))
        out: dict = {}
    elif args[0] == "make-trk":
        make_trk(args[1], int(args[2]))
        out = {}
    else:
        import zvf

        out = zvf.convert(args[1], args[2], overwrite=True)
        out = {k: v for k, v in out.items() if k in ("vertices", "objects")}
    print(json.dumps({**out, "seconds": time.perf_counter() - t0, "peak_rss_mib": _rss_mib()}))


def step(*args: str) -> dict:
    res = subprocess.run([sys.executable, __file__, "--worker", *args], check=True, capture_output=True, text=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--las-points", type=int, default=10_000_000)
    p.add_argument("--streamlines", type=int, default=200_000)
    p.add_argument("--quick", action="store_true", help="200k points, 5k streamlines")
    p.add_argument("--dir", help="working directory (default: a temporary one)")
    p.add_argument("--worker", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        return worker(a.worker)
    if a.quick:
        a.las_points, a.streamlines = 200_000, 5_000
    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        rows = []
        for kind, count, unit, back in (("las", a.las_points, "points", "laz"),
                                        ("trk", a.streamlines, "streamlines", "trk")):
            if not count:
                continue
            src, store, out = (os.path.join(d, n) for n in (f"big.{kind}", f"{kind}.zarrvectors", f"back.{back}"))
            step(f"make-{kind}", src, str(count))
            size = os.path.getsize(src) / 2**20
            rows.append((f"{kind.upper()} -> ZVF", f"{count:,} {unit}, {size:.0f} MiB", step("convert", src, store)))
            rows.append((f"ZVF -> {back.upper()}", f"{count:,} {unit}", step("convert", store, out)))
    print(f"{'step':12} {'input':40} {'seconds':>8} {'peak RSS MiB':>13}")
    for name, what, r in rows:
        print(f"{name:12} {what:40} {r['seconds']:8.1f} {r['peak_rss_mib']:13.0f}")


if __name__ == "__main__":
    main()
