"""``zvf ingest TARGET SOURCE...``: a point cloud from many .npy/.npz files, written by Dask workers."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from . import _args
from .progress import ProgressBar


def bar_progress(bar: ProgressBar) -> Callable[[dict[str, Any]], None]:
    """A ``progress(dict)`` callback of the Dask engine drawing on ``bar`` (one stage at a time)."""

    def progress(p: dict[str, Any]) -> None:
        bar.unit = f"{p['stage']} tasks"
        bar.update(p["done"], p["total"])

    return progress


def cmd_ingest(args: argparse.Namespace) -> int:
    import zvf.dask as zd

    kw: dict[str, Any] = {}
    if args.shard_shape is not None:
        kw["shard_shape"] = _args.cells(args.shard_shape)
    from ..distributed.run import client_for

    chunk_shape = _args.shape(args.chunk_shape)
    if chunk_shape is None:  # --chunk-shape none: a store needs chunks
        raise SystemExit(f"zvf: --chunk-shape must be numbers like 10,10,5, got {args.chunk_shape!r}")
    workers = args.workers or os.cpu_count() or 1
    with ProgressBar("ingest", quiet=args.quiet) as bar, client_for(workers, args.scheduler) as client:
        s = zd.write_points(args.target, args.sources, chunk_shape=chunk_shape,
                            bin_shape=_args.shape(args.bin_shape), compression=args.compression, dtype=args.dtype,
                            overwrite=args.overwrite, job=args.job, storage_options=_args.options(args.option),
                            client=client, progress=bar_progress(bar), **kw)
    print(f"{len(args.sources)} sources -> {s.url}: {s.vertex_count:,} points, {s.chunk_count:,} chunks, "
          f"{s.object_count:,} objects, {s.cells_written:,} cells")
    return 0


def register(sub: _args.Subcommands, target: _args.AddTarget) -> None:
    p = sub.add_parser("ingest", help="write a point cloud from many .npy/.npz files on Dask workers "
                                      "(same store as one write of their concatenation)")
    target(p)
    p.add_argument("sources", nargs="+", help=".npy positions or .npz (positions, object_ids, attr_<name>) files, "
                                             "in order")
    p.add_argument("--chunk-shape", required=True, help="chunk shape: numbers per axis")
    p.add_argument("--bin-shape", help="bin shape: numbers per axis")
    p.add_argument("--compression", help="zstd, blosc or gzip")
    p.add_argument("--shard-shape", help="cells per shard per axis, e.g. 4,4,4")
    p.add_argument("--dtype", help="stored position dtype (default: the files')")
    p.add_argument("--job", help="job name: run again with the same name to resume a job that died")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store")
    _args.add_cluster_flags(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_ingest)


def cmd_export_dask(args: argparse.Namespace) -> int:
    """``zvf export --workers N|--scheduler ADDR``: OUT is a directory of one file per partition."""
    import zvf.dask as zd

    from ..distributed.run import client_for

    with ProgressBar("export", quiet=args.quiet) as bar, client_for(args.workers, args.scheduler) as client:
        s = zd.export(args.target, args.out, format=args.format or "parquet", level=args.level,
                      batch_chunks=args.batch_chunks, batch_objects=args.batch_objects,
                      storage_options=_args.options(args.option), client=client, progress=bar_progress(bar))
    print(f"exported {s['vertices']:,} vertices in {s['partitions']} partitions -> {args.out}/part.*.{s['format']} "
          f"in {s['seconds']:.2f} s")
    return 0
