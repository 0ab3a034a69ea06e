"""``zvf pyramid TARGET --factor 2:1 --factor 2:2``: add coarser levels to a store."""

from __future__ import annotations

import argparse
import json
from typing import Any

from . import _args
from .progress import ProgressBar


def parse_factor(text: str) -> tuple[int, float]:
    """``COARSEN:SPARSITY`` (``2:1``, ``2:1.5``) or just ``COARSEN``."""
    coarsen, _, sparsity = text.partition(":")
    try:
        return int(coarsen), float(sparsity or 1)
    except ValueError:
        raise SystemExit(f"zvf: --factor must look like 2:1 (coarsen:sparsity), got {text!r}") from None


def cmd_pyramid(args: argparse.Namespace) -> int:
    import zvf

    bar = ProgressBar("pyramid", unit="blocks", quiet=args.quiet)

    def progress(s: dict[str, Any]) -> None:
        bar.update(s["blocks"], s["total_blocks"], f"level {s['level']}: {s['vertices']:,} vertices")
    scales = None
    if args.chunk_scale:
        if len(args.chunk_scale) != len(args.factor):
            raise SystemExit("zvf: give --chunk-scale once per --factor, or not at all")
        scales = args.chunk_scale
    kw = dict(chunk_scale_factors=scales, cross_level_depth=0 if args.links == "none" else args.depth,
              cross_level_storage=args.links, seed=args.seed, storage_options=_args.options(args.option),
              progress=progress)
    factors = [parse_factor(f) for f in args.factor]
    if args.workers is None and args.scheduler is None:
        with bar:
            summary = zvf.build_pyramid(args.target, factors, **kw)
    else:  # the blocks of each level as tasks on Dask workers
        import zvf.dask as zd

        from ..distributed.run import client_for

        with bar, client_for(args.workers, args.scheduler) as client:
            summary = zd.build_pyramid(args.target, factors, client=client, **kw)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        for lv in summary["levels"]:
            kept = f", {lv['objects_kept']}/{lv['objects']} objects" if "objects" in lv else ""
            print(f"level {lv['level']}: {lv['vertex_count']} vertices{kept}")
    return 0


def register(sub: _args.Subcommands, target: _args.AddTarget) -> None:
    p = sub.add_parser("pyramid", help="build coarser levels (a multi-resolution pyramid) in place")
    target(p)
    p.add_argument("--factor", action="append", required=True, metavar="COARSEN:SPARSITY",
                   help="one per new level: bins COARSEN times the level below, keep 1/SPARSITY of the objects")
    p.add_argument("--chunk-scale", action="append", type=int, metavar="N",
                   help="one per --factor: chunk edge N times the level below (default 1)")
    p.add_argument("--links", choices=("explicit", "implicit", "none"), default="explicit",
                   help="cross-level links: +1 and -1 (explicit), +1 only (implicit), none")
    p.add_argument("--depth", type=int, default=1, metavar="N",
                   help="cross-level links up to N levels apart (default 1; -1: every pair of levels)")
    p.add_argument("--seed", type=int, default=0, help="seed of the object/point sampling (default 0)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    _args.add_cluster_flags(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=cmd_pyramid)
