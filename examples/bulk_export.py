"""Bulk export: stream a whole store out of S3 into local files, in bounded memory.

1. ingest: ``zvf.write_points`` over a generator of batches (streaming writer:
   rows spill to local files, memory stays bounded whatever the total size);
2. ``ds.iter_chunks()``: every stored chunk as numpy batches, a few batches
   fetched ahead while the previous one is written -> a CSV written batch by batch;
3. the same with the command line: ``zvf export TARGET OUT.npz`` (progress bar on
   stderr, summary line with vertices, requests, bytes, MB/s).

Run: python examples/bulk_export.py   (in-process S3 server; files go to the current directory)
"""

import asyncio
import os

import numpy as np

import zvf
from zvf.cli.main import main as zvf_cli
from zvf.testing import EmbeddedS3

N, BATCH = 300_000, 40_000


def batches():
    """Stand-in for a reader of a big file: batches of positions + one attribute."""
    rng = np.random.default_rng(2)
    for start in range(0, N, BATCH):
        m = min(BATCH, N - start)
        yield {"positions": rng.uniform(0, 100, (m, 3)).astype(np.float32),
               "attributes": {"intensity": rng.random(m, dtype=np.float32)}}


async def export_csv(target: str, opts: dict, path: str) -> int:
    ds = await zvf.aio.open(target, storage_options=opts)
    rows = 0
    with open(path, "w") as fh:
        fh.write("x,y,z,intensity\n")
        async for sel in ds.iter_chunks(prefetch=4, batch_chunks=16):  # one Selection per 16 chunks
            table = np.column_stack([sel.positions, sel.attributes["intensity"]])
            # the file write runs in a thread, so the next batches keep downloading meanwhile
            await asyncio.to_thread(np.savetxt, fh, table, delimiter=",", fmt="%.9g")
            rows += len(sel)
    s = ds.stats.snapshot()
    print(f"iter_chunks -> {path}: {rows:,} rows, {s['requests']} requests, {s['bytes']:,} bytes")
    await ds.close()
    return rows


def run() -> None:
    s3 = EmbeddedS3.start()
    try:
        opts = s3.storage_options()
        target = f"s3://{s3.create_bucket()}/scan.zarrvectors"
        summary = zvf.write_points(target, batches(), chunk_shape=(25, 25, 25), bin_shape=(12.5, 12.5, 12.5),
                                   bounds=([0, 0, 0], [100, 100, 100]), compression="zstd", storage_options=opts)
        assert summary.vertex_count == N
        print(f"streamed {N:,} points in batches of {BATCH:,} into {summary.chunk_count} chunks")

        rows = asyncio.run(export_csv(target, opts, "scan.csv"))
        with open("scan.csv") as fh:
            assert rows == N and sum(1 for _ in fh) == N + 1

        cli_opts = [x for k, v in opts.items() for x in ("-o", f"{k}={v}")]
        assert zvf_cli(["export", target, "scan.npz", *cli_opts]) == 0
        data = np.load("scan.npz")
        assert data["positions"].shape == (N, 3) and data["attr_intensity"].shape == (N,)
        expected = np.concatenate([b["positions"] for b in batches()])
        assert np.array_equal(np.unique(data["positions"], axis=0), np.unique(expected, axis=0))
        print(f"zvf export -> scan.npz: {len(data['positions']):,} rows "
              f"({os.path.getsize('scan.npz') / 1e6:.1f} MB), same points as written")
    finally:
        s3.stop()


if __name__ == "__main__":
    run()
