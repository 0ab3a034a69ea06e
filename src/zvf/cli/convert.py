"""``zvf convert IN OUT``: a file into a ZVF store, or a store into a file (formats: README "Conversions")."""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import TYPE_CHECKING, Any, TextIO

from . import _args
from .progress import ProgressBar

if TYPE_CHECKING:
    from ..converters import ConvertProgress


def _value(text: str) -> bool | int | float | list[int | float] | str:
    """A ``--set`` value: a number, a boolean, comma-separated numbers, or the text itself."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        parts = [float(v) if any(c in v for c in ".eE") else int(v) for v in text.split(",")]
    except ValueError:
        return text
    return parts if "," in text else parts[0]


def cmd_convert(args: argparse.Namespace) -> int:
    import zvf

    from ..converters.base import STORE_OPTIONS

    extra: dict[str, Any] = {}
    for pair in args.set or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"zvf: --set expects key=value, got {pair!r}")
        key = key.replace("-", "_")
        if key in STORE_OPTIONS:
            flag = "-o/--option" if key == "storage_options" else f"--{key.replace('_', '-')}"
            raise SystemExit(f"zvf: --set {key}: a store option, given as {flag}")
        extra[key] = _value(value)
    kw: dict[str, Any] = {}
    if args.shard_shape is not None:
        kw["shard_shape"] = _args.cells(args.shard_shape)
    if args.keep_order:
        extra["keep_order"] = True
    chunk_shape = _args.shape(args.chunk_shape)
    if chunk_shape is None:
        raise SystemExit("zvf: --chunk-shape: a store needs chunks, 'auto' or numbers like 10,10,5 (not none)")

    with ProgressBar("convert", quiet=args.quiet) as bar, bar.ticking(), warnings.catch_warnings():
        def progress(p: ConvertProgress) -> None:
            bar.unit = p["unit"]
            bar.update(p["done"], p["total"])

        def warn(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: TextIO | None = None, line: str | None = None) -> None:
            """A warning (a LayoutWarning comes before the upload) on a line of its own, as it happens."""
            bar.close()
            print(f"zvf: warning: {message}", file=sys.stderr, flush=True)

        warnings.showwarning = warn

        src = args.src[0] if len(args.src) == 1 else args.src
        s = zvf.convert(src, args.dst, from_=args.from_, to=args.to, chunk_shape=chunk_shape,
                        bin_shape=_args.shape(args.bin_shape), compression=args.compression, overwrite=args.overwrite,
                        storage_options=_args.options(args.option), progress=progress, **kw, **extra)
    counts = ", ".join(f"{s[k]:,} {k}" for k in ("files", "vertices", "objects", "faces", "edges") if k in s)
    print(f"{s['src']} ({s['from']}) -> {s['dst']} ({s['to']}): {counts} in {s['seconds']:.2f} s")
    return 0


def register(sub: _args.Subcommands, target: _args.AddTarget) -> None:
    from ..converters import FORMATS

    names = [*sorted(FORMATS), "zvf"]
    p = sub.add_parser("convert", help="convert a LAS/LAZ, PLY, OBJ, STL, SWC, TRK, TCK, TRX, CSV, Parquet or "
                                       "GraphML file (or several SWC files) into a ZVF store, or a store into such "
                                       "a file")
    p.add_argument("src", nargs="+", help="input: a file, or a ZVF store (path or URL); several files of one "
                                           "format (SWC), a quoted glob ('neurons/*.swc') or a directory of "
                                           "them go into one store, objects numbered in file order")
    p.add_argument("dst", help="output: a ZVF store (path or URL), or a file")
    p.add_argument("--from", dest="from_", choices=names, help="format of SRC (default: from its suffix)")
    p.add_argument("--to", choices=names, help="format of DST (default: from its suffix)")
    p.add_argument("--chunk-shape", default="auto", help="store chunk shape: 'auto' or numbers per axis")
    p.add_argument("--bin-shape", default="auto", help="store bin shape: 'auto' (default: sized from the data, "
                                                      "what a pyramid coarsens by), 'none' or numbers per axis")
    p.add_argument("--compression", help="store compression: zstd, blosc or gzip")
    p.add_argument("--shard-shape", help="cells per shard per axis, e.g. 4,4,4, or auto (default: unsharded)")
    p.add_argument("-o", "--option", action="append", metavar="KEY=VALUE", help="storage option of the store side")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="a format option, e.g. level=1, batch_rows=500000, ascii=true, scale=0.01")
    p.add_argument("--keep-order", action="store_true",
                   help="point files: keep each point's row number (attribute zvf_source_row), so the store "
                        "converts back to a file in the input's row order (it does by itself once kept)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store or file")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=cmd_convert)
