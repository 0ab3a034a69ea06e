"""Reading a file through a parser package: importing the package, which may not be installed
(:func:`need` names the zvf extra that brings it), and turning what it raises on a bad file into
an InputFileError naming the file (:func:`reading`, :func:`guarded`)."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..errors import InputFileError, MissingDependencyError, ZvfError


def need(module: str, extra: str, fmt: str) -> Any:
    """Import an optional package, or say which zvf extra brings it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{fmt} conversion needs the package {module!r}: pip install 'zvf[{extra}]'") from exc


@contextlib.contextmanager
def reading(src: str, fmt: str, errors: tuple[type[BaseException], ...]) -> Iterator[None]:
    """What a file parser raises on a bad file (``errors``) as an InputFileError naming the file."""
    try:
        yield
    except ZvfError:
        raise
    except errors as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputFileError(f"{src}: not a valid {fmt.upper()} file (truncated or another format?): "
                             f"{detail}") from exc


def guarded(batches: Callable[[], Iterable[dict[str, Any]]], src: str, fmt: str,
            errors: tuple[type[BaseException], ...]) -> Callable[[], Iterator[dict[str, Any]]]:
    """``batches`` whose parser errors become InputFileErrors (see :func:`reading`)."""

    def run() -> Iterator[dict[str, Any]]:
        with reading(src, fmt, errors):
            yield from batches()

    return run
