"""``zvf demo``: write a million-point cloud to S3 (or TARGET), query it, show the cost.

Without a target it starts an S3 server inside this process (moto on
127.0.0.1) so the demo runs the real object-store path -- obstore over
HTTP -- on a machine with no network; without moto installed it falls
back to a local temporary directory.
"""

from __future__ import annotations

import tempfile
import time

import numpy as np


def demo_cloud(n: int, seed: int = 7) -> tuple[np.ndarray, dict]:
    """Clustered points in a 1000^3 box with an intensity and a class label."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(100, 900, (64, 3))
    which = rng.integers(0, len(centers), n)
    pos = np.clip(centers[which] + rng.normal(0, 60, (n, 3)), 0, 1000).astype(np.float32)
    attrs = {"intensity": rng.random(n).astype(np.float32), "label": which.astype(np.int32)}
    return pos, attrs


def run_demo(target: str | None, *, n_points: int, storage_options=None) -> int:
    import zvf

    server = None
    if target is None:
        try:
            from ..io.embedded import EmbeddedS3

            server = EmbeddedS3.start()
            target = f"s3://{server.create_bucket('zvf-demo')}/demo.zarrvectors"
            storage_options = {**server.storage_options(), **(storage_options or {})}
            print(f"started an in-process S3 server at {server.endpoint}")
        except RuntimeError as exc:
            target = f"{tempfile.mkdtemp(prefix='zvf-demo-')}/demo.zarrvectors"
            print(f"{exc}; using a local store instead")
    try:
        pos, attrs = demo_cloud(n_points)
        t0 = time.perf_counter()
        summary = zvf.write_points(target, pos, chunk_shape=(125.0, 125.0, 125.0), bin_shape=(31.25,) * 3,
                                   bounds=([0, 0, 0], [1000, 1000, 1000]), attributes=attrs,
                                   compression="zstd", overwrite=True, storage_options=storage_options)
        t_write = time.perf_counter() - t0
        print(f"wrote {summary['vertex_count']:,} points in {summary['chunk_count']} chunks to {target} "
              f"in {t_write:.2f} s ({summary['requests']['puts']} PUTs, {summary['requests']['bytes_put']:,} bytes)")

        t0 = time.perf_counter()
        ds = zvf.open(target, storage_options=storage_options)
        t_open = time.perf_counter() - t0
        opened = ds.stats.snapshot()
        print(f"opened in {t_open * 1000:.1f} ms: {opened['requests']} requests, {opened['round_trips']} round trips")
        boxes = [([0, 0, 0], [100, 100, 100]), ([400, 400, 400], [600, 600, 600]), ([250, 0, 250], [750, 1000, 300]),
                 ([100, 100, 100], [900, 900, 900])]
        print(f"{'bbox':>40} {'points':>9} {'ms':>8} {'GETs':>5} {'bytes':>11}")
        for lo, hi in boxes:
            before = ds.stats.snapshot()
            t0 = time.perf_counter()
            sel = ds.query((lo, hi))
            ms = (time.perf_counter() - t0) * 1000
            after = ds.stats.snapshot()
            truth = int(np.all((pos >= lo) & (pos <= hi), axis=1).sum())
            check = "" if truth == len(sel) else f"  MISMATCH: expected {truth}"
            print(f"{str((lo, hi)):>40} {len(sel):>9,} {ms:>8.1f} {after['requests'] - before['requests']:>5} "
                  f"{after['bytes'] - before['bytes']:>11,}{check}")
            if check:
                return 1
        ds.close()
        return 0
    finally:
        if server is not None:
            server.stop()
