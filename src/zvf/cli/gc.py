"""``zvf gc TARGET [--retention S]``: delete what no kept version of a store uses (see zvf.lifecycle.gc)."""

from __future__ import annotations

import argparse
import json

from . import _args
from .progress import ProgressBar


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # nan too
        raise SystemExit(f"zvf: --retention must be a number of seconds >= 0, got {text!r}")
    return value


def cmd_gc(args: argparse.Namespace) -> int:
    import zvf

    with ProgressBar("gc", quiet=args.quiet) as bar, bar.ticking():
        summary = zvf.gc(args.target, retention=args.retention, storage_options=_args.options(args.option))
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{summary['url']}: {summary['deleted']} object(s) deleted, {len(summary['reclaimed'])} version(s) "
              f"reclaimed, {len(summary['kept'])} superseded version(s) kept"
              + ("; documents rewritten from the root" if summary["documents_rewritten"] else ""))
    return 0


def register(sub: _args.Subcommands, target: _args.AddTarget) -> None:
    p = sub.add_parser("gc", help="delete what no kept version of a store uses (superseded versions past their "
                                  "retention, leftovers of failed changes)")
    target(p)
    p.add_argument("--retention", type=_seconds, metavar="SECONDS",
                   help="keep superseded versions this long (default: the store's; 0 reclaims every one: readers "
                        "still on them get StaleDatasetError)")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=cmd_gc)
