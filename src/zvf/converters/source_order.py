"""Point clouds in their source file's row order (``keep_order=True``).

A conversion into a store with ``keep_order`` numbers every row with its position in the file
(the vertex attribute ``SOURCE_ROW``); converting back to a point file then writes the rows in
that order, sorting them through temporary files bucket by bucket, so memory stays bounded.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any

import numpy as np

from ..config import tuning
from ..errors import InvalidArgumentError
from .base import Written

SOURCE_ROW = "zvf_source_row"  # vertex attribute: a point's row in its source file (keep_order=True)


def numbered(batches: Callable[[], Iterable[dict[str, Any]]]) -> Callable[[], Iterator[dict[str, Any]]]:
    """``batches`` of points with each row's position in the source as the attribute ``SOURCE_ROW``
    (``keep_order=True``), so that converting back writes the rows in the file's order."""

    def run() -> Iterator[dict[str, Any]]:
        row = 0
        for batch in batches():
            n = len(batch["positions"])
            batch["attributes"][SOURCE_ROW] = np.arange(row, row + n, dtype=np.int64)
            row += n
            yield batch

    return run


async def keep_order_of(ds: Any, level: int, wanted: bool | None) -> bool:
    """Whether a point export writes the source's row order: the level has ``SOURCE_ROW`` (from a
    conversion with ``keep_order=True``) unless ``wanted`` is False; True without it is an error."""
    has = SOURCE_ROW in (await ds.level(level)).named("vertex_attributes")
    if wanted and not has:
        raise InvalidArgumentError(f"{ds.url}: keep_order=True needs the vertex attribute {SOURCE_ROW!r}, which "
                                   f"a conversion into the store with keep_order=True (--keep-order) adds")
    return has and wanted is not False


async def point_batches(ds: Any, level: int, keep_order: bool | None, written: Written,
                        batch_chunks: int = 16) -> AsyncIterator[Any]:
    """A point cloud's rows for a file: in the source's order where the store kept it (see
    :func:`keep_order_of`), else chunk by chunk; ``SOURCE_ROW`` is never among the attributes.
    ``written`` counts the rows as they are read."""
    ordered = await keep_order_of(ds, level, keep_order)
    names = [n for n in (await ds.level(level)).named("vertex_attributes") if ordered or n != SOURCE_ROW]
    batches = written.each(ds.iter_chunks(level=level, attributes=names, batch_chunks=batch_chunks, prefetch=2),
                           level)
    return in_source_order(batches) if ordered else batches


async def in_source_order(batches: AsyncIterator[Any], bucket_rows: int | None = None) -> AsyncIterator[Any]:
    """Point batches (Selections carrying ``SOURCE_ROW``) again in the source's row order, without it.

    Rows are spilled to temporary files, one per column and bucket of ``bucket_rows`` (default
    the ``convert_batch_rows`` setting) consecutive source rows; then each bucket is read back, sorted and yielded.
    Memory: one batch, then one bucket; disk: the level's rows once.
    """
    from ..read.selection import Selection

    bucket_rows = bucket_rows or tuning().convert_batch_rows
    with tempfile.TemporaryDirectory(prefix="zvf-order-") as tmp:
        layout: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}
        buckets: set[int] = set()
        async for sel in batches:
            if not len(sel):
                continue
            cols = {"positions": sel.positions, **sel.attributes}
            layout = layout or {k: (v.dtype, v.shape[1:]) for k, v in cols.items()}
            bucket = sel.attributes[SOURCE_ROW] // bucket_rows
            order = np.argsort(bucket, kind="stable")
            keys, starts = np.unique(bucket[order], return_index=True)
            for b, lo, hi in zip(keys.tolist(), starts.tolist(), [*starts[1:].tolist(), len(order)]):
                rows = order[lo:hi]
                buckets.add(b)
                for k, name in enumerate(layout):  # one file per column and bucket, in layout's order
                    with open(os.path.join(tmp, f"{b}.{k}"), "ab") as fh:
                        fh.write(np.ascontiguousarray(cols[name][rows]).tobytes())
        for b in sorted(buckets):
            cols = {name: np.fromfile(os.path.join(tmp, f"{b}.{k}"), dtype=dt).reshape(-1, *shape)
                    for k, (name, (dt, shape)) in enumerate(layout.items())}
            for k in range(len(layout)):
                os.remove(os.path.join(tmp, f"{b}.{k}"))
            order = np.argsort(cols.pop(SOURCE_ROW), kind="stable")
            positions = cols.pop("positions")[order]
            yield Selection(positions, {k: v[order] for k, v in cols.items()})
