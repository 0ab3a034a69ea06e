"""``zvf query TARGET``: compose a selection (box, ball, ids, groups, predicates) and read, count or explain it."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any, Literal

from . import _args

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike

    from ..read.selection import Selection

Tables = dict[str, dict[str, "np.ndarray"]]
"""The objects/groups tables of a level, name -> column -> values (:func:`zvf.read.export.object_tables`)."""
Explained = tuple[Literal["explain"], str]
Counted = tuple[Literal["count"], int, dict[str, int]]
Read = tuple[Literal["read"], "Selection", Tables, dict[str, int], str | None]


def _numbers(text: str, what: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",")]
    except ValueError:
        raise SystemExit(f"zvf: {what} must be comma-separated numbers like 10,-20,5 (got {text!r})") from None


def _ids(text: str, what: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"zvf: {what} must be comma-separated integers like 1,5,9 (got {text!r})") from None


def _value(text: str, what: str) -> float | int:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            raise SystemExit(f"zvf: {what}: {text!r} is not a number") from None


def parse_where(items: list[str] | None) -> dict[str, Any] | None:
    """``NAME=LO:HI`` (closed; a side may be empty), ``NAME=V`` or ``NAME=V1,V2,...``; NAME may be ``rgb[1]``."""

    if not items:
        return None
    out: dict[str, Any] = {}
    for name, cond in _args.key_values(items, "--where expects NAME=LO:HI, NAME=VALUE or NAME=V1,V2"):
        what = f"--where {name}"
        if ":" in cond:
            lo, _, hi = cond.partition(":")
            out[name] = (_value(lo, what) if lo else None, _value(hi, what) if hi else None)
        elif "," in cond:
            out[name] = [_value(v, what) for v in cond.split(",")]
        else:
            out[name] = _value(cond, what)
    return out


def selection_args(args: argparse.Namespace) -> dict[str, Any]:
    """The ``select(...)`` keywords the flags ask for."""
    kw: dict[str, Any] = {"level": "auto" if args.max_vertices is not None else args.level, "clip": args.clip,
                "limit": args.limit, "max_vertices": args.max_vertices, "where": parse_where(args.where)}
    if args.bbox:
        kw["bbox"] = (_numbers(args.bbox[0], "--bbox LO"), _numbers(args.bbox[1], "--bbox HI"))
    if args.near:
        kw["near"] = (_numbers(args.near[0], "--near CENTER"), _value(args.near[1], "--near R"))
    if args.objects:
        kw["objects"] = _ids(args.objects, "--objects")
    if args.groups:
        kw["groups"] = _ids(args.groups, "--groups")
    return kw


def selected_tables(tables: Tables, ids: ArrayLike) -> Tables:
    """The objects/groups tables of a level (:func:`zvf.read.export.object_tables`) cut to the rows of the
    objects ``ids`` (a group's memberships of other objects, and its -1 row when it has none, left out)."""
    import numpy as np

    key = {"objects": "objects_object_ids", "groups": "groups_object_ids"}
    out: Tables = {}
    for table, arrays in tables.items():
        keep = np.isin(arrays[key[table]], ids)
        out[table] = {name: values[keep] for name, values in arrays.items()}
    return out


def cmd_query(args: argparse.Namespace) -> int:
    """Count, explain or read a selection; rows go to ``--out`` FILE, or to stdout with ``--format``
    (or ``--out -``), the summary to stdout unless the rows are there (then stderr).  A result with
    objects adds the objects/groups tables ``zvf export`` writes, cut to its objects."""
    import anyio

    import zvf

    from ..read.export import object_tables
    from ..read.writers import STDOUT, check_out, format_of, link_table, open_writer

    kw = selection_args(args)
    out = args.out if args.out is not None else (STDOUT if args.format else None)
    if (args.count or args.explain) and out is not None:
        raise SystemExit("zvf: --count and --explain print no rows: leave out --out and --format")
    fmt = None
    if out is not None:  # before any request: bad suffix, missing pyarrow, no such directory, not a file
        fmt = format_of(out, args.format, flag="--format")
        check_out(out, fmt)
    t0 = time.perf_counter()

    async def run() -> Explained | Counted | Read:
        async with await zvf.aio.open(args.target, storage_options=_args.options(args.option)) as ds:
            q = ds.select(**kw)
            if args.explain:
                return "explain", (json.dumps((await q.plan()).to_dict(), indent=2, default=str) if args.json
                                   else await q.explain())
            if args.count:
                return "count", await q.count(), ds.stats.snapshot()
            sel = await q.read()
            tables: Tables = {}
            owners = sel.objects if sel.objects is not None else sel.object_ids
            if out is not None and owners is not None and (out != STDOUT or fmt == "npz"):  # stdout: one table
                level = kw["level"] if kw["level"] != "auto" else (await q.plan()).level
                if ds.has_objects(level):
                    tables = selected_tables(await object_tables(ds, level), owners)
            return "read", sel, tables, ds.stats.snapshot(), ds.geometry_type

    done = anyio.run(run, backend="asyncio")
    if done[0] == "explain":
        print(done[1])
        return 0
    if done[0] == "count":
        n, stats = done[1], done[2]
        ms = (time.perf_counter() - t0) * 1000
        if args.json:
            print(json.dumps({"vertices": n, "ms": round(ms, 3), "requests": stats["requests"],
                              "bytes": stats["bytes"]}))
        else:
            print(f"{n} vertices (counted in {ms:.1f} ms, {stats['requests']} requests, {stats['bytes']} bytes)")
        return 0
    _, sel, tables, stats, geometry = done
    elapsed = time.perf_counter() - t0
    files = []
    if out is not None:
        links = link_table(geometry, clip=args.clip)
        check_out(out, fmt, [t for t in (links, *tables) if t])
        assert fmt is not None  # format_of gave it with out
        writer = open_writer(out, fmt, sel, links, rows=len(sel), tables=list(tables))
        try:
            writer.write(sel)
            for table, arrays in tables.items():
                writer.write_table(table, arrays)
        except BaseException:
            writer.abort()
            raise
        writer.close()
        files = writer.files()
    summary: dict[str, Any] = {"vertices": len(sel), "objects": None if sel.objects is None else len(sel.objects),
               "ms": round(elapsed * 1000, 3), "requests": stats["requests"], "bytes": stats["bytes"],
               "files": [f for f in files if f != STDOUT]}
    stream = sys.stderr if out == STDOUT else sys.stdout  # stdout carries the rows
    if args.json:
        print(json.dumps(summary), file=stream)
        return 0
    extra = f", {summary['objects']} objects" if summary["objects"] is not None else ""
    print(f"{len(sel)} vertices{extra} in {elapsed * 1000:.1f} ms, {stats['requests']} requests, "
          f"{stats['bytes']} bytes" + (f" -> {', '.join(summary['files'])}" if summary["files"] else ""), file=stream)
    return 0


def register(sub: _args.Subcommands, target: _args.AddTarget) -> None:
    p = sub.add_parser("query", help="read, count or explain a selection (box, ball, objects, groups, where); "
                                     "print its rows or write them to a file")
    target(p)
    p.add_argument("--bbox", nargs=2, metavar=("LO", "HI"), help="closed box corners, e.g. -10,20,5 60,70,55")
    p.add_argument("--near", nargs=2, metavar=("X,Y,Z", "R"), help="closed ball: center and radius")
    p.add_argument("--where", action="append", metavar="NAME=LO:HI",
                   help="vertex/object attribute predicate: NAME=LO:HI, NAME=V or NAME=V1,V2; rgb[1]=0:10 "
                        "picks a channel (repeatable; all must hold)")
    p.add_argument("--objects", metavar="ID,ID,...", help="only these object ids")
    p.add_argument("--groups", metavar="G,G,...", help="only objects of these groups")
    p.add_argument("--clip", action="store_true", help="polylines: only the matching vertices, not whole objects")
    p.add_argument("--limit", type=int, help="at most N vertices (point clouds) or N objects")
    p.add_argument("--level", type=int, default=0)
    p.add_argument("--max-vertices", type=int, help="pick the finest level whose estimate fits N (level auto)")
    only = p.add_mutually_exclusive_group()
    only.add_argument("--count", action="store_true", help="print the count only (from indexes where possible)")
    only.add_argument("--explain", action="store_true", help="print the read plan and read nothing")
    p.add_argument("--format", choices=("csv", "json", "npz", "parquet"),
                   help="print the rows to stdout in this format (json: JSON Lines, one object per row), or "
                        "the format of --out when its suffix does not say")
    p.add_argument("--out", help="write the rows to FILE.npz, .csv, .parquet or .json (objects: with "
                                 "vertex_index, and FILE.edges/faces/objects/groups.csv|parquet as for zvf export, "
                                 "cut to the objects read); - for stdout")
    p.add_argument("--json", action="store_true", help="print the summary (count, requests, bytes) as JSON")
    p.set_defaults(func=cmd_query)
