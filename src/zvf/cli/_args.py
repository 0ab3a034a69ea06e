"""Argument parsing every ``zvf`` subcommand shares: storage options, shapes, counts, cluster flags."""

from __future__ import annotations

import argparse
from collections.abc import Iterator


def key_values(items: list[str], usage: str) -> Iterator[tuple[str, str]]:
    """``KEY=VALUE`` flag arguments split at their first ``=``; one without a key or ``=`` exits
    with ``zvf: {usage} (got ...)``."""
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"zvf: {usage} (got {item!r})")
        yield key, value


def options(pairs: list[str] | None) -> dict | None:
    """``-o key=value`` pairs as storage_options (numbers and booleans parsed)."""
    if not pairs:
        return None
    out: dict = {}
    for key, value in key_values(pairs, "-o expects key=value"):
        low = value.lower()
        if low in ("true", "false"):
            out[key] = low == "true"
        else:
            try:
                out[key] = int(value)
            except ValueError:
                out[key] = value
    return out


def at_least(low: int):
    """An argparse type: an integer >= ``low``."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if n < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {n}")
        return n

    return parse


count, positive = at_least(0), at_least(1)


def shape(text: str | None):
    """``auto``, ``none`` or comma-separated numbers (``10,10,5``)."""
    if text is None or text in ("auto", "none"):
        return None if text == "none" else text
    try:
        sizes = [float(v) for v in text.split(",")]
    except ValueError:
        raise SystemExit(f"zvf: a shape must be 'auto' or numbers like 10,10,5, got {text!r}") from None
    if not all(s > 0 for s in sizes):  # nan too
        raise SystemExit(f"zvf: a shape's sizes must be positive numbers like 10,10,5, got {text!r}")
    return sizes


def cells(text: str) -> list[int]:
    """``--shard-shape``: cells per shard per axis, whole numbers >= 1 (``4,4,4``)."""
    try:
        counts = [int(v) for v in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise SystemExit(f"zvf: --shard-shape must be whole numbers >= 1 like 4,4,4, got {text!r}")
    return counts


def add_cluster_flags(p) -> None:
    """``--workers N`` / ``--scheduler ADDRESS``: run the command on Dask (``pip install 'zvf[dask]'``)."""
    p.add_argument("--workers", type=positive, help="run on a local Dask cluster of N worker processes "
                                                    "(ingest: default one per core)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="run on the Dask scheduler at ADDRESS (tcp://host:8786)")
