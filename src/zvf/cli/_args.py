"""Argument parsing every ``zvf`` subcommand shares: storage options, shapes, counts, cluster flags."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal, NoReturn, Protocol, TypeAlias, cast

if TYPE_CHECKING:
    from ..io.options import StorageOptions

# Values such as ``-1,-1,-1`` or ``-10,20,5`` are values, not options (argparse only knows plain negative numbers).
_NEGATIVE = re.compile(r"^-(\d|\.\d)[\d.,eE+-]*$")


class Parser(argparse.ArgumentParser):
    """Argument errors as one line on stderr and exit 2 (no usage block, no traceback); negative
    coordinate lists are values (``--chunk-shape -1,-1,-1`` reaches its own check)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


Subcommands: TypeAlias = "argparse._SubParsersAction[Parser]"
"""What ``add_subparsers`` returns: each command module's ``register`` adds its parser to it."""


class AddTarget(Protocol):
    """Adds the ``target`` positional and the ``-o KEY=VALUE`` storage options to a subcommand's parser."""

    def __call__(self, p: argparse.ArgumentParser, optional: bool = False) -> None: ...


def key_values(items: list[str], usage: str) -> Iterator[tuple[str, str]]:
    """``KEY=VALUE`` flag arguments split at their first ``=``; one without a key or ``=`` exits
    with ``zvf: {usage} (got ...)``."""
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"zvf: {usage} (got {item!r})")
        yield key, value


def options(pairs: list[str] | None) -> StorageOptions | None:
    """``-o key=value`` pairs as storage_options (numbers and booleans parsed)."""
    if not pairs:
        return None
    out: dict[str, Any] = {}
    for key, value in key_values(pairs, "-o expects key=value"):
        low = value.lower()
        if low in ("true", "false"):
            out[key] = low == "true"
        else:
            try:
                out[key] = int(value)
            except ValueError:
                out[key] = value
    # the keys are the user's: open_store checks them at run time (an unknown one is InvalidArgumentError)
    return cast("StorageOptions", out)


def at_least(low: int) -> Callable[[str], int]:
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


def shape(text: str | None) -> Literal["auto"] | list[float] | None:
    """``auto``, ``none`` or comma-separated numbers (``10,10,5``); None when not given."""
    if text is None or text == "none":
        return None
    if text == "auto":
        return "auto"
    try:
        sizes = [float(v) for v in text.split(",")]
    except ValueError:
        raise SystemExit(f"zvf: a shape must be 'auto' or numbers like 10,10,5, got {text!r}") from None
    if not all(s > 0 for s in sizes):  # nan too
        raise SystemExit(f"zvf: a shape's sizes must be positive numbers like 10,10,5, got {text!r}")
    return sizes


def cells(text: str) -> list[int] | Literal["auto"]:
    """``--shard-shape``: cells per shard per axis, whole numbers >= 1 (``4,4,4``), or ``auto``."""
    if text == "auto":
        return "auto"
    try:
        counts = [int(v) for v in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise SystemExit(f"zvf: --shard-shape must be whole numbers >= 1 like 4,4,4 or auto, got {text!r}")
    return counts


def add_cluster_flags(p: argparse.ArgumentParser) -> None:
    """``--workers N`` / ``--scheduler ADDRESS``: run the command on Dask (``pip install 'zvf[dask]'``)."""
    p.add_argument("--workers", type=positive, help="run on a local Dask cluster of N worker processes "
                                                    "(ingest: default one per core)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="run on the Dask scheduler at ADDRESS (tcp://host:8786)")
