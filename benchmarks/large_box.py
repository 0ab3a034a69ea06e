"""Client CPU of large point boxes: ``ds.query(box)`` on a local store (issue 26).

Writes N points (default 5 M) of two distributions (``terrain``: ground, buildings, trees over
1 km²; ``blobs``: Gaussian clusters in a 1 km cube; the generators of ``peers.py``) to a temporary
local store, in two layouts: ``auto`` (``chunk_shape="auto", bin_shape="auto"``, zstd: what
``peers.py`` writes) and ``bins`` (explicit 125 m chunks tiled by 31.25 m bins, zstd).  Then times
``ds.query(box)`` for boxes holding about 30 % and 3 % of the points (the median of ``--reps`` runs,
CPU seconds beside), checks every answer against numpy (count and an order-free checksum of
positions, class and intensity), and prints a cProfile top of one 30 % query of the first store.
No network: what is left is decoding, masking and assembly.  ~1.5 min on 2 quiet cores.

    .venv/bin/python benchmarks/large_box.py [--points 5000000] [--reps 5] [--profile 12]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

import numpy as np  # noqa: E402 - after the sys.path setup
import peers  # noqa: E402 - after the sys.path setup

import zvf  # noqa: E402 - after the sys.path setup

LAYOUTS = {
    "auto": {"chunk_shape": "auto", "bin_shape": "auto"},
    "bins": {"chunk_shape": (125.0, 125.0, 125.0), "bin_shape": (31.25, 31.25, 31.25)},
}
FRACTIONS = {"30%": 0.30, "3%": 0.03}


def load_avg() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[0]


def run(args: argparse.Namespace) -> int:
    """The whole benchmark on one event loop (cProfile sees the loop thread: the assembly runs there)."""
    with asyncio.Runner() as runner:
        return runner.run(measure(args))


async def measure(args: argparse.Namespace) -> int:
    wrong = 0
    print(f"{args.points:,} points, median of {args.reps}; load average beside each row (the machine is shared)")
    print(f"{'data':8} {'layout':6} {'box':4} {'points':>10} {'median s':>9} {'cpu s':>7} {'load':>5}  answer")
    first: tuple[zvf.aio.AsyncDataset, tuple[np.ndarray, np.ndarray]] | None = None
    with tempfile.TemporaryDirectory(prefix="zvf-large-box-") as tmp:
        for name, make in peers.DATASETS.items():
            data = make(args.points, seed=7)
            boxes = peers.make_boxes(name, data, 1, seed=7)
            truth = peers.Truth(data)
            for layout, opts in LAYOUTS.items():
                url = f"{tmp}/{name}-{layout}.zarr"
                await zvf.aio.write_points(url, data["positions"],
                                 attributes={"class": data["class"], "intensity": data["intensity"]},
                                           compression="zstd", **opts)
                ds = await zvf.aio.open(url)
                for label, frac in FRACTIONS.items():
                    workload = "large" if frac == 0.30 else "medium"
                    lo, hi = (np.asarray(b, np.float64) for b in boxes[workload][0])
                    times, cpus = [], []
                    for _ in range(args.reps):
                        t0, c0 = time.perf_counter(), time.process_time()
                        sel = await ds.query((lo, hi))
                        times.append(time.perf_counter() - t0)
                        cpus.append(time.process_time() - c0)
                    got = peers.checksum(sel.positions, sel.attributes["class"], sel.attributes["intensity"])
                    ok = got == truth((lo, hi))
                    wrong += not ok
                    print(f"{name:8} {layout:6} {label:4} {len(sel):>10,} {statistics.median(times):>9.3f} "
                          f"{statistics.median(cpus):>7.3f} {load_avg():>5}  {'ok' if ok else 'WRONG'}", flush=True)
                    if first is None and frac == 0.30:
                        first = (ds, (lo, hi))
                if first is None or first[0] is not ds:
                    await ds.close()
        if first is not None and args.profile:
            ds, box = first
            prof = cProfile.Profile()
            prof.enable()
            await ds.query(box)
            prof.disable()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(args.profile)
            print("\ncProfile of one 30 % query (terrain, auto), by own time:")
            print("\n".join(line for line in out.getvalue().splitlines()[4:] if line.strip()))
            await ds.close()
    return 1 if wrong else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--points", type=int, default=5_000_000)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--profile", type=int, default=12, help="cProfile rows to print (0: none)")
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
