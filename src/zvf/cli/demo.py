"""``zvf demo``: write a point cloud and a set of streamlines, query both, read one object, show the cost.

Without a target it starts an S3 server inside this process (moto on
127.0.0.1) so the demo runs the real object-store path -- obstore over
HTTP -- on a machine with no network; without moto installed it falls
back to a local temporary directory.  TARGET is a prefix: the stores are
``TARGET/points.zarrvectors`` and ``TARGET/streamlines.zarrvectors``.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, ParamSpec, cast

import numpy as np

from .progress import ProgressBar

if TYPE_CHECKING:
    from ..api.sync import Dataset
    from ..io.options import StorageOptions
    from ..write.types import WriteSummary

P = ParamSpec("P")

BOUNDS = ([0.0, 0.0, 0.0], [1000.0, 1000.0, 1000.0])


def demo_cloud(n: int, seed: int = 7) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Clustered points in a 1000^3 box with an intensity and a class label."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(100, 900, (64, 3))
    which = rng.integers(0, len(centers), n)
    pos = np.clip(centers[which] + rng.normal(0, 60, (n, 3)), 0, 1000).astype(np.float32)
    attrs = {"intensity": rng.random(n).astype(np.float32), "label": which.astype(np.int32)}
    return pos, attrs


def demo_streamlines(n: int, seed: int = 11) -> list[np.ndarray]:
    """Smooth random walks of 20-120 vertices (2-unit steps) inside the 1000^3 box."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(20, 121, n)
    starts = np.repeat(rng.uniform(150, 850, (n, 3)), lengths, axis=0)
    heading = np.repeat(rng.normal(0, 1, (n, 3)), lengths, axis=0) + rng.normal(0, 0.4, (int(lengths.sum()), 3))
    steps = 2.0 * heading / np.linalg.norm(heading, axis=1, keepdims=True)
    cuts = np.cumsum(lengths)[:-1]
    walks = np.split(steps, cuts)
    return [np.clip(s + np.cumsum(w, axis=0), 0, 1000).astype(np.float32) for s, w in
            zip(np.split(starts, cuts), walks)]


def _cost(ds: Dataset, before: dict[str, int]) -> str:
    after = ds.stats.snapshot()
    return f"{after['requests'] - before['requests']} GETs, {after['bytes'] - before['bytes']:,} bytes"


def _write(label: str, quiet: bool, fn: Callable[P, WriteSummary], *args: P.args,
           **kwargs: P.kwargs) -> tuple[WriteSummary, float]:
    t0 = time.perf_counter()
    with ProgressBar(f"write {label}", quiet=quiet) as bar, bar.ticking():
        summary = fn(*args, **kwargs)
    return summary, time.perf_counter() - t0


def _points(target: str, n: int, quiet: bool, opts: StorageOptions | None) -> bool:
    import zvf

    pos, attrs = demo_cloud(n)
    summary, secs = _write("points", quiet, zvf.write_points, target, pos, chunk_shape=(125.0, 125.0, 125.0),
                           bin_shape=(31.25,) * 3, bounds=BOUNDS, attributes=attrs, compression="zstd",
                           overwrite=True, storage_options=opts)
    print(f"points: wrote {summary.vertex_count:,} points in {summary.chunk_count} chunks to {target} "
          f"in {secs:.2f} s ({summary.requests['puts']} PUTs, {summary.requests['bytes_put']:,} bytes)")
    t0 = time.perf_counter()
    with zvf.open(target, storage_options=opts) as ds:
        opened = ds.stats.snapshot()
        print(f"  opened in {(time.perf_counter() - t0) * 1000:.1f} ms: {opened['requests']} requests, "
              f"{opened['round_trips']} round trips")
        print(f"  {'bbox':>40} {'points':>9} {'ms':>8}  cost")
        for lo, hi in [([100, 100, 100], [250, 250, 250]), ([400, 400, 400], [600, 600, 600]),
                       ([250, 0, 250], [750, 1000, 300])]:
            before = ds.stats.snapshot()
            t0 = time.perf_counter()
            sel = ds.query((lo, hi))
            ms = (time.perf_counter() - t0) * 1000
            truth = int(np.all((pos >= lo) & (pos <= hi), axis=1).sum())
            check = "" if truth == len(sel) else f"  MISMATCH: expected {truth}"
            print(f"  {(lo, hi)!s:>40} {len(sel):>9,} {ms:>8.1f}  {_cost(ds, before)}{check}")
            if check:
                return False
    return True


def _streamlines(target: str, n: int, quiet: bool, opts: StorageOptions | None) -> bool:
    import zvf

    lines = demo_streamlines(n)
    summary, secs = _write("streamlines", quiet, zvf.write_polylines, target, lines, chunk_shape=(125.0,) * 3,
                           bounds=BOUNDS, geometry_type="streamline", compression="zstd", overwrite=True,
                           storage_options=opts)
    print(f"streamlines: wrote {summary.object_count:,} streamlines ({summary.vertex_count:,} vertices) in "
          f"{summary.chunk_count} chunks to {target} in {secs:.2f} s ({summary.requests['puts']} PUTs)")
    with zvf.open(target, storage_options=opts) as ds:
        lo, hi = np.array([400, 400, 400]), np.array([600, 600, 600])
        before = ds.stats.snapshot()
        t0 = time.perf_counter()
        sel = ds.query((lo, hi))
        ms = (time.perf_counter() - t0) * 1000
        truth = sum(bool(np.all((s >= lo) & (s <= hi), axis=1).any()) for s in lines)
        got = 0 if sel.objects is None else len(sel.objects)
        check = "" if got == truth else f"  MISMATCH: expected {truth} streamlines"
        print(f"  bbox {(lo.tolist(), hi.tolist())}: {got:,} whole streamlines, {len(sel):,} vertices in "
              f"{ms:.1f} ms, {_cost(ds, before)}{check}")
        oid = n // 2
        before = ds.stats.snapshot()
        t0 = time.perf_counter()
        one = ds.read_object(oid)
        ms = (time.perf_counter() - t0) * 1000
        same = np.array_equal(one.positions, lines[oid])
        print(f"  object {oid}: {len(one)} vertices in traversal order in {ms:.1f} ms, {_cost(ds, before)}"
              + ("" if same else "  MISMATCH: not the streamline written"))
        return not check and same


def run_demo(target: str | None, *, n_points: int, n_objects: int = 2000, quiet: bool = False,
             storage_options: StorageOptions | None = None) -> int:
    server = None
    if target is None:
        try:
            from ..testing.s3 import EmbeddedS3

            server = EmbeddedS3.start()
            target = f"s3://{server.create_bucket('zvf-demo')}/demo"
            # EmbeddedS3 gives its endpoint and credentials as a plain dict of StorageOptions keys
            storage_options = cast("StorageOptions", {**server.storage_options(), **(storage_options or {})})
            print(f"started an in-process S3 server at {server.endpoint}")
        except RuntimeError as exc:
            target = tempfile.mkdtemp(prefix="zvf-demo-")
            print(f"{exc}; using a local store instead")
    prefix = str(target).rstrip("/")
    try:
        ok = _points(f"{prefix}/points.zarrvectors", n_points, quiet, storage_options)
        ok = ok and _streamlines(f"{prefix}/streamlines.zarrvectors", n_objects, quiet, storage_options)
        return 0 if ok else 1
    finally:
        if server is not None:
            server.stop()
