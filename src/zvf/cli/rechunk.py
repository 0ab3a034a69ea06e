"""``zvf rechunk SRC DST --chunk-shape 10,10,10 --compression zstd``: copy a store with a new layout."""

from __future__ import annotations

import argparse
from typing import Any

from . import _args
from .progress import ProgressBar


def cmd_rechunk(args: argparse.Namespace) -> int:
    import zvf

    kw: dict[str, Any] = {}
    if args.compression is not None:
        kw["compression"] = None if args.compression == "none" else args.compression
    if args.shard_shape is not None:
        kw["shard_shape"] = None if args.shard_shape == "none" else _args.cells(args.shard_shape)
    if args.by_attribute is not None:
        kw["by_attribute"] = args.by_attribute
    with ProgressBar("rechunk", quiet=args.quiet) as bar, bar.ticking():
        summary = zvf.rechunk(args.target, args.dst, chunk_shape=_args.shape(args.chunk_shape),
                              bin_shape=_args.shape(args.bin_shape), overwrite=args.overwrite,
                              storage_options=_args.options(args.option),
                              target_storage_options=_args.options(args.dst_option),
                              **kw)
    print(f"{args.dst}: {summary.vertex_count} vertices in {summary.chunk_count} chunks")
    return 0


def register(sub: _args.Subcommands, target: _args.AddTarget) -> None:
    p = sub.add_parser("rechunk", help="copy a store with another chunk/bin shape, compression or sharding")
    target(p)
    p.add_argument("dst", help="the new store")
    p.add_argument("--chunk-shape", help="'auto' or numbers per axis, e.g. 10,10,10 (default: the source's)")
    p.add_argument("--bin-shape", help="'auto', 'none' or numbers per axis (default: the source's)")
    p.add_argument("--compression", help="none, zstd, blosc or gzip (default: the source's)")
    p.add_argument("--shard-shape", help="cells per shard per axis, e.g. 4,4,4, auto, or none (default: the source's)")
    p.add_argument("--by-attribute", metavar="NAME",
                   help="chunk a point cloud by this integer vertex attribute first (a leading category axis)")
    p.add_argument("--dst-option", action="append", metavar="KEY=VALUE", help="storage option of DST")
    p.add_argument("--overwrite", action="store_true", help="replace a store at DST")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=cmd_rechunk)
