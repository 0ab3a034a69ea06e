"""The ``zvf`` command: inspect, query, validate, export and demo ZVF stores."""

from __future__ import annotations

import argparse
import json
import sys
import time

from ..errors import ZvfError


def _options(pairs: list[str] | None) -> dict | None:
    """``-o key=value`` pairs as storage_options (numbers and booleans parsed)."""
    if not pairs:
        return None
    out: dict = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"zvf: -o expects key=value, got {pair!r}")
        low = value.lower()
        if low in ("true", "false"):
            out[key] = low == "true"
        else:
            try:
                out[key] = int(value)
            except ValueError:
                out[key] = value
    return out


def _point(text: str, what: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",")]
    except ValueError:
        raise SystemExit(f"zvf: {what} must be comma-separated numbers like 10,20,5 (got {text!r})") from None


def cmd_info(args) -> int:
    import zvf

    with zvf.open(args.target, storage_options=_options(args.option)) as ds:
        info = ds.info()
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for key, value in info.items():
            print(f"{key:18} {value}")
    return 0


def cmd_query(args) -> int:
    import numpy as np

    import zvf

    lo, hi = _point(args.bbox[0], "bbox LO"), _point(args.bbox[1], "bbox HI")
    t0 = time.perf_counter()
    with zvf.open(args.target, storage_options=_options(args.option)) as ds:
        sel = ds.query((lo, hi), level=args.level)
        stats = ds.stats.snapshot()
    elapsed = time.perf_counter() - t0
    if args.out:
        columns = {"positions": sel.positions, **{f"attr_{k}": v for k, v in sel.attributes.items()}}
        if sel.object_ids is not None:
            columns["object_ids"] = sel.object_ids
        if args.out.endswith(".npz"):
            np.savez(args.out, **columns)
        elif args.out.endswith(".csv"):
            write_csv(args.out, sel)
        else:
            raise SystemExit("zvf: --out must end in .npz or .csv")
    print(f"{len(sel)} vertices in {elapsed * 1000:.1f} ms, {stats['requests']} requests, "
          f"{stats['bytes']} bytes" + (f" -> {args.out}" if args.out else ""))
    return 0


def write_csv(path: str, sel) -> None:
    """One row per vertex: coordinates, object id, then every attribute channel."""
    import numpy as np

    ndim = sel.positions.shape[1]
    names = ["x", "y", "z", "w"][:ndim] if ndim <= 4 else [f"d{i}" for i in range(ndim)]
    cols = [sel.positions.astype(np.float64)]
    if sel.object_ids is not None:
        names.append("object_id")
        cols.append(sel.object_ids.reshape(-1, 1).astype(np.float64))
    for name, values in sel.attributes.items():
        values = values.reshape(len(sel), -1)
        names += [name] if values.shape[1] == 1 else [f"{name}_{i}" for i in range(values.shape[1])]
        cols.append(values.astype(np.float64))
    table = np.hstack(cols) if cols else np.zeros((0, 0))
    np.savetxt(path, table, delimiter=",", header=",".join(names), comments="", fmt="%.9g")


def cmd_validate(args) -> int:
    import zvf

    report = zvf.validate(args.target, level=args.level, storage_options=_options(args.option))
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.summary())
    return 0 if report.ok else 1


def cmd_export(args) -> int:
    """Every vertex of a level to npz/csv/parquet, streamed batch by batch, with a progress bar."""
    import anyio

    import zvf

    from ..read.export import ProgressBar, export, format_of

    fmt = format_of(args.out, args.format)  # before any request: unknown suffix, missing pyarrow
    bar = None if args.quiet else ProgressBar(sys.stderr)

    async def run() -> dict:
        ds = await zvf.aio.open(args.target, storage_options=_options(args.option))
        try:
            return await export(ds, args.out, level=args.level, fmt=fmt, prefetch=args.prefetch,
                                batch_chunks=args.batch_chunks, progress=bar)
        finally:
            await ds.close()

    try:
        s = anyio.run(run, backend="asyncio")
    finally:
        if bar is not None:
            bar.close()
    print(f"exported {s['vertices']:,} vertices from {s['chunks']} chunks -> {s['out']} ({s['format']}): "
          f"{s['requests']} requests, {s['bytes']:,} bytes, {s['seconds']:.2f} s, {s['mb_per_s']:.1f} MB/s")
    return 0


def cmd_demo(args) -> int:
    from .demo import run_demo

    return run_demo(args.target, n_points=args.points, storage_options=_options(args.option))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zvf", description="Read, write and check Zarr Vectors (ZVF) stores.")
    sub = parser.add_subparsers(dest="command", required=True)

    def target(p, optional=False):
        p.add_argument("target", nargs="?" if optional else None,
                       help="store: path, file://, memory://, s3://bucket/prefix, gs://, az://, http(s)://")
        p.add_argument("-o", "--option", action="append", metavar="KEY=VALUE",
                       help="storage option (endpoint, region, access_key_id, allow_http, concurrency, ...)")

    p = sub.add_parser("info", help="summarize a store")
    target(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("query", help="vertices inside a closed bounding box")
    target(p)
    p.add_argument("--bbox", nargs=2, required=True, metavar=("LO", "HI"), help="corners, e.g. 10,20,5 60,70,55")
    p.add_argument("--level", type=int, default=0)
    p.add_argument("--out", help="write the result to FILE.npz or FILE.csv")
    p.set_defaults(func=cmd_query)

    p = sub.add_parser("validate", help="check a store against the format (levels 1-5)")
    target(p)
    p.add_argument("--level", type=int, default=3, choices=range(1, 6))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("export", help="write every vertex of a level to .npz, .csv or .parquet (streamed)")
    target(p)
    p.add_argument("out", help="output file; its suffix picks the format unless --format is given")
    p.add_argument("--level", type=int, default=0)
    p.add_argument("--format", choices=("npz", "csv", "parquet"), help="default: from OUT's suffix")
    p.add_argument("--prefetch", type=int, default=4, help="batches fetched ahead (default 4)")
    p.add_argument("--batch-chunks", type=int, default=16, help="chunks per batch (default 16)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("demo", help="write a demo point cloud and query it (in-process S3 when no target)")
    target(p, optional=True)
    p.add_argument("--points", type=int, default=1_000_000)
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ZvfError as exc:
        print(f"zvf: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
