"""``zvf validate TARGET [--level N] [--json]``: exit 0 when the store is valid, 1 otherwise.

``add_validate_command(subparsers)`` registers the subcommand on the ``zvf``
parser; ``run_validate(args)`` runs it; :func:`main` is the same command
standalone (``python -m zvf.validate``).  Exit code 2 means the arguments
were wrong (argparse, a bad storage option).
"""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["add_validate_command", "run_validate", "main"]


def _configure(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("target", help="store path or URL (file, s3://, gs://, az://, http(s)://, memory://)")
    p.add_argument("--level", type=int, default=3, choices=range(1, 6), metavar="N",
                   help="1 structure, 2 metadata, 3 consistency (default), 4 conventions, 5 multi-resolution")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--storage-option", "-o", action="append", default=[], metavar="KEY=VALUE",
                   help="storage option (repeatable), e.g. -o endpoint=http://127.0.0.1:9000")
    p.set_defaults(func=run_validate)
    return p


def add_validate_command(subparsers) -> argparse.ArgumentParser:
    """Add ``validate`` to a ``zvf`` sub-parser set (``parser.add_subparsers()``)."""
    p = subparsers.add_parser("validate", help="check a store against the ZVF format (levels 1-5)",
                              description=__doc__.split("\n\n")[0])
    return _configure(p)


def _options(pairs: list[str]) -> dict | None:
    out: dict = {}
    for pair in pairs:
        k, sep, v = pair.partition("=")
        if not sep or not k:
            raise SystemExit(f"zvf validate: storage option {pair!r} is not KEY=VALUE")
        out[k] = v
    return out or None


def run_validate(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code (0 ok, 1 problems, 2 bad arguments)."""
    import zvf
    from zvf.errors import InvalidArgumentError

    try:
        report = zvf.aio  # noqa: F841 - make sure the package is importable before timing starts
        from zvf.api import sync

        report = sync.validate(args.target, level=args.level, storage_options=_options(args.storage_option))
    except InvalidArgumentError as e:
        print(f"zvf validate: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.summary())
    return 0 if report.ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = _configure(argparse.ArgumentParser(prog="zvf validate", description=__doc__.split("\n\n")[0]))
    args = parser.parse_args(argv)
    return run_validate(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
