"""Quickstart: write a point cloud, open it, query a box -- blocking API first, then async.

Run: python examples/quickstart.py [TARGET]   (default: a temporary local store)
"""

import asyncio
import sys
import tempfile

import numpy as np

import zvf

target = sys.argv[1] if len(sys.argv) > 1 else f"{tempfile.mkdtemp()}/quickstart.zarrvectors"

rng = np.random.default_rng(0)
points = rng.uniform(0, 100, (10_000, 3)).astype(np.float32)
intensity = rng.random(len(points)).astype(np.float32)

zvf.write_points(target, points, chunk_shape=(25, 25, 25), bin_shape=(12.5, 12.5, 12.5),
                 bounds=([0, 0, 0], [100, 100, 100]), attributes={"intensity": intensity}, compression="zstd")

with zvf.open(target) as ds:
    print(ds)
    sel = ds.query(([10, 10, 10], [30, 30, 30]))
    print(f"{len(sel)} points in the box; mean intensity {sel.attributes['intensity'].mean():.3f}")
    expected = int(np.all((points >= 10) & (points <= 30), axis=1).sum())
    assert len(sel) == expected, (len(sel), expected)


async def main() -> None:
    ds = await zvf.aio.open(target)
    boxes = [([0, 0, 0], [20, 20, 20]), ([50, 50, 50], [100, 100, 100])]
    results = await asyncio.gather(*(ds.query(b) for b in boxes))  # one store-wide concurrency limit
    print("async:", [len(r) for r in results], "points;", ds.stats.snapshot()["requests"], "requests in all")
    await ds.close()


asyncio.run(main())
