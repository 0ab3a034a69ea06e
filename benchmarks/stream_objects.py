"""Peak RSS of streamed vs in-memory streamline writes (issue 11, item 2).

Each write runs in its own subprocess, which reports its ``ru_maxrss`` (peak
resident set, includes the interpreter and numpy: ~the ``baseline`` row).
Streamlines are random walks of ``--length`` float32 xyz vertices in a
1000^3 box, 100^3 chunks, generated batch by batch so the streamed writer
never sees the whole input; the in-memory writer gets the full list.

    python benchmarks/stream_objects.py                       # 200k x 50 in-memory vs streamed, 1M x 50 streamed
    python benchmarks/stream_objects.py --streamlines 50000 --big 250000   # scaled down
    python benchmarks/stream_objects.py --baseline /tmp/old/src --reps 3    # seconds, this tree against another

The targets: streamed 200 k streamlines under 3x their input size, and 50 M
vertices under 1 GiB.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BATCH = 10_000  # streamlines per batch


def walks(first: int, count: int, length: int):
    """Streamlines ``first .. first + count`` (deterministic per index range) as one (count, length, 3) array."""
    import numpy as np

    rng = np.random.default_rng(first)
    start = rng.uniform(50, 950, (count, 1, 3))
    return np.clip(start + np.cumsum(rng.normal(0, 2.0, (count, length, 3)), axis=1), 0, 1000).astype(np.float32)


def child(mode: str, n: int, length: int, out: str) -> dict:
    import zvf

    t0 = time.perf_counter()
    kw = {"chunk_shape": (100.0, 100.0, 100.0), "bounds": ([0.0] * 3, [1000.0] * 3), "geometry_type": "streamline",
          "compression": "zstd"}
    if mode == "memory":
        pl = [walks(i, min(BATCH, n - i), length) for i in range(0, n, BATCH)]
        pl = [p for block in pl for p in block]
        summary = zvf.write_polylines(out, pl, **kw)
    elif mode == "stream":
        batches = (walks(i, min(BATCH, n - i), length) for i in range(0, n, BATCH))
        summary = zvf.write_polylines(out, batches, **kw)
    else:
        summary = None
    wall = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"mode": mode, "streamlines": n, "vertices": n * length, "input_bytes": n * length * 12,
            "peak_rss": rss, "seconds": round(wall, 2),
            "chunks": None if summary is None else summary.chunk_count,
            "fragments": None if summary is None else summary.fragment_count}


def run(mode: str, n: int, length: int, src: str | None = None, keep_in: str | None = None) -> dict:
    """One write in a child process (``src``: the directory its ``zvf`` package comes from).  With
    ``keep_in`` the store stays there for the caller to delete at the end (deleting thousands of files
    between runs slows the next run's file creations on ext4), and the child starts after a sync."""
    import os

    tmp = tempfile.mkdtemp(prefix="zvf-bench-stream-", dir=keep_in)
    env = None if src is None else {**os.environ, "PYTHONPATH": src}
    if keep_in is not None:
        os.sync()
    try:
        res = subprocess.run([sys.executable, __file__, "--child", mode, "--streamlines", str(n),
                              "--length", str(length), "--out", str(Path(tmp) / "s.zarrvectors")],
                             capture_output=True, text=True, check=True, env=env)
        return json.loads(res.stdout.strip().splitlines()[-1])
    finally:
        if keep_in is None:
            shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streamlines", type=int, default=200_000)
    ap.add_argument("--big", type=int, default=1_000_000, help="streamlines of the large streamed case (0: skip)")
    ap.add_argument("--length", type=int, default=50)
    ap.add_argument("--child", choices=["memory", "stream", "baseline"])
    ap.add_argument("--out")
    ap.add_argument("--baseline", help="a directory holding another zvf package: the memory and streamed writes "
                                       "of --streamlines run with both, interleaved, --reps times (medians)")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.streamlines, args.length, args.out)))
        return
    if args.baseline:
        return side_by_side(args)
    with tempfile.TemporaryDirectory(prefix="zvf-bench-stream-") as keep:
        rows = [run("baseline", 0, args.length, keep_in=keep),
                run("memory", args.streamlines, args.length, keep_in=keep),
                run("stream", args.streamlines, args.length, keep_in=keep)]
        if args.big:
            rows.append(run("stream", args.big, args.length, keep_in=keep))
    print(f"{'mode':9} {'streamlines':>11} {'vertices':>11} {'input MB':>9} {'peak RSS MB':>11} {'RSS/input':>9} "
          f"{'seconds':>8}")
    for r in rows:
        ratio = r["peak_rss"] / r["input_bytes"] if r["input_bytes"] else float("nan")
        print(f"{r['mode']:9} {r['streamlines']:>11} {r['vertices']:>11} {r['input_bytes'] / 1e6:>9.0f} "
              f"{r['peak_rss'] / 2**20:>11.0f} {ratio:>9.2f} {r['seconds']:>8}")


def side_by_side(args) -> None:
    """Seconds and peak RSS of each write with this tree's zvf and with ``--baseline``'s, interleaved."""
    import statistics

    here = str(Path(__file__).resolve().parent.parent / "src")
    got: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="zvf-bench-stream-") as keep:
        for rep in range(args.reps):
            for mode in ("memory", "stream"):
                pair = [("baseline", args.baseline), ("this tree", here)]
                for label, src in pair[::-1] if rep % 2 else pair:  # who goes first alternates
                    got.setdefault((mode, label), []).append(run(mode, args.streamlines, args.length, src, keep))
    print(f"{'mode':7} {'zvf':10} {'seconds (median)':>16} {'peak RSS MB':>11}   runs (s)")
    for (mode, label), rs in got.items():
        secs = [r["seconds"] for r in rs]
        print(f"{mode:7} {label:10} {statistics.median(secs):>16.2f} "
              f"{statistics.median(r['peak_rss'] for r in rs) / 2**20:>11.0f}   {secs}")


if __name__ == "__main__":
    main()
