"""The ``zvf`` command: inspect, query, validate, export and demo ZVF stores."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from ..errors import FormatError, IncompleteStoreError, InputFileError, ZvfError
from . import _args
from .progress import ProgressBar


def cmd_info(args: argparse.Namespace) -> int:
    """The store summary plus one line per level: vertices, stored chunks and objects."""
    import anyio

    import zvf

    async def run() -> dict[str, Any]:
        async with await zvf.aio.open(args.target, storage_options=_args.options(args.option)) as ds:
            info = await ds.info()
            rows = []
            for index in ds.levels:
                lvl = await ds.level(index)
                objects = None
                if ds.has_objects(index):
                    objects = (lvl.groups.get("object_index") or {}).get("num_objects")
                    if not isinstance(objects, int):
                        objects = len(await ds.object_ids(level=index))
                rows.append({"level": index, "vertices": lvl.meta.vertex_count,
                             "chunks": len(lvl.nonempty_chunks), "objects": objects})
            info["level_summary"] = rows
            return info

    info = anyio.run(run, backend="asyncio")
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    for key, value in info.items():
        if key.endswith("_attributes") and isinstance(info.get(f"{key[:-1]}_dtypes"), dict):
            continue  # the names again: shown with their dtypes
        if isinstance(value, dict):  # attribute name -> dtype
            value = ", ".join(f"{name} ({dtype})" for name, dtype in value.items()) or "-"
        if key != "level_summary":
            print(f"{key:24} {value}")
    print(f"{'level':>5} {'vertices':>14} {'chunks':>9} {'objects':>11}")
    for row in info["level_summary"]:
        objects = "-" if row["objects"] is None else f"{row['objects']:,}"
        print(f"{row['level']:>5} {row['vertices']:>14,} {row['chunks']:>9,} {objects:>11}")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    import zvf

    with ProgressBar("validate", quiet=args.quiet) as bar, bar.ticking():
        report = zvf.validate(args.target, level=args.level, storage_options=_args.options(args.option))
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.summary())
    return 0 if report.ok else 1


def cmd_export(args: argparse.Namespace) -> int:
    """A level to npz/csv/parquet, streamed batch by batch (objects with their order and links)."""
    import anyio

    import zvf

    from ..read.export import export
    from ..read.writers import STDOUT, check_out, format_of

    if args.workers or args.scheduler:  # on Dask: OUT is a directory, one file per partition
        from .ingest import cmd_export_dask

        return cmd_export_dask(args)
    fmt = format_of(args.out, args.format, flag="--format")  # before any request: unknown suffix, no pyarrow
    check_out(args.out, fmt)
    bar = ProgressBar("export", quiet=args.quiet)

    def progress(s: dict[str, Any]) -> None:
        bar.unit = s["unit"]
        bar.update(s["done"], s["total"], f"{s['vertices']:,} vertices {s['mb_per_s']:.1f} MB/s")

    async def run() -> dict[str, Any]:
        async with await zvf.aio.open(args.target, storage_options=_args.options(args.option)) as ds:
            return await export(ds, args.out, level=args.level, fmt=fmt, prefetch=args.prefetch,
                                batch_chunks=args.batch_chunks, batch_objects=args.batch_objects or 1024,
                                progress=progress)

    with bar:
        s = anyio.run(run, backend="asyncio")
    unit = s["unit"]
    print(f"exported {s['vertices']:,} vertices from {s[unit]:,} {unit} -> {', '.join(s['files'])} ({s['format']}): "
          f"{s['requests']} requests, {s['bytes']:,} bytes, {s['seconds']:.2f} s, {s['mb_per_s']:.1f} MB/s",
          file=sys.stderr if args.out == STDOUT else sys.stdout)  # stdout carries the rows
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(args.target, n_points=args.points, n_objects=args.objects, quiet=args.quiet,
                    storage_options=_args.options(args.option))


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = _args.Parser(prog="zvf", description="Read, write and check Zarr Vectors (ZVF) stores.")
    parser.add_argument("--version", action="version", version=f"zvf {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def target(p: argparse.ArgumentParser, optional: bool = False) -> None:
        p.add_argument("target", nargs="?" if optional else None,
                       help="store: path, file://, memory://, s3://bucket/prefix, gs://, az://, http(s)://")
        p.add_argument("-o", "--option", action="append", metavar="KEY=VALUE",
                       help="storage option (endpoint, region, access_key_id, allow_http, concurrency, ...)")

    p = sub.add_parser("info", help="summarize a store")
    target(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_info)

    from .query import register as register_query

    register_query(sub, target)

    p = sub.add_parser("validate", help="check a store against the format (levels 1-5)")
    target(p)
    p.add_argument("--level", type=int, default=3, choices=range(1, 6))
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("export", help="write a level to .npz, .csv or .parquet (streamed); objects keep their "
                                      "vertex order, edges and faces (OUT.edges.csv / OUT.faces.parquet)")
    target(p)
    p.add_argument("out", help="output file (only a regular file there is replaced), or - for stdout; its "
                               "suffix picks the format unless --format is given")
    p.add_argument("--level", type=_args.count, default=0)
    p.add_argument("--format", choices=("npz", "csv", "parquet", "json"),
                   help="default: from OUT's suffix (json: JSON Lines, one object per row)")
    p.add_argument("--prefetch", type=_args.positive, default=4, help="batches fetched ahead (default 4)")
    p.add_argument("--batch-chunks", type=_args.positive, default=16,
                   help="chunks per batch, point clouds (default 16)")
    p.add_argument("--batch-objects", type=_args.positive, help="objects per batch, object geometries (default 1024; "
                                                          "with --workers: a chunk window's objects each)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    _args.add_cluster_flags(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("demo", help="write a demo point cloud and streamlines, query and read them "
                                    "(in-process S3 when no target)")
    target(p, optional=True)
    p.add_argument("--points", type=_args.positive, default=1_000_000, help="points in the cloud (default 1,000,000)")
    p.add_argument("--objects", type=_args.positive, default=2_000, help="streamlines (default 2,000)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=cmd_demo)

    from .pyramid import register as register_pyramid

    register_pyramid(sub, target)
    from .rechunk import register as register_rechunk

    register_rechunk(sub, target)
    from .gc import register as register_gc

    register_gc(sub, target)
    from .convert import register as register_convert

    register_convert(sub, target)
    from .ingest import register as register_ingest

    register_ingest(sub, target)
    from .neuroglancer import register as register_neuroglancer

    register_neuroglancer(sub, target)
    return parser


# Errors in what a file or store holds exit 1; everything else a user can fix in the command exits 2.
DATA_ERRORS = (FormatError, IncompleteStoreError, InputFileError)


def main(argv: list[str] | None = None) -> int:
    """Run one command; errors a user can act on end in one line on stderr, never a traceback:
    exit 2 for the command (arguments, options, targets), 1 for the data (a malformed file or store,
    a local I/O error), 130 on Ctrl-C; a reader that goes away (``zvf info | head``) ends it quietly."""
    args = build_parser().parse_args(argv)
    try:
        command: Callable[[argparse.Namespace], int] = args.func
        return command(args)
    except BrokenPipeError:
        # stdout's reader is gone: later writes (and the flush at exit) go nowhere instead of failing again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141  # as a shell reports a command ended by SIGPIPE
    except DATA_ERRORS as exc:
        print(f"zvf: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except ZvfError as exc:
        print(f"zvf: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # the commands' own argument checks: SystemExit("zvf: ...")
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 2
        raise
    except KeyboardInterrupt:
        print("zvf: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # a local file the command reads or writes
        print(f"zvf: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
