"""Row-index arithmetic shared by the object reads: ranges, segments, row matching.

Everything is vectorized: no loop over rows, objects or chunks.
"""

from __future__ import annotations

import numpy as np

from ..format.grid import box_cells, dense_ids, extremes


def expand_ranges(starts: np.ndarray, lengths: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Concatenation of ``arange(s, s + n)`` for each (s, n), without a loop.

    One output-sized array (``out`` when given, e.g. a column of a wider
    table): ones, with each range's first entry set to the jump from the
    previous range's last value, then an in-place cumsum.
    """
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    starts = np.asarray(starts, dtype=np.int64).reshape(-1)
    if lengths.size and not (lengths > 0).all():
        keep = lengths > 0
        starts, lengths = starts[keep], lengths[keep]
    if lengths.size == 0:
        return np.zeros(0, dtype=np.int64) if out is None else out
    ends = np.cumsum(lengths)
    if out is None:
        out = np.ones(int(ends[-1]), dtype=np.int64)
    else:
        out[:] = 1
    out[0] = starts[0]
    out[ends[:-1]] = starts[1:] - (starts[:-1] + lengths[:-1] - 1)
    return np.cumsum(out, out=out)


def intersect_spans(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Rows in both of two sets of sorted, disjoint (start, stop) spans, as such spans ((K, 2) int64)."""
    a = np.asarray(a, dtype=np.int64).reshape(-1, 2)
    b = np.asarray(b, dtype=np.int64).reshape(-1, 2)
    first = np.searchsorted(b[:, 1], a[:, 0], side="right")  # b's spans ending past each a's start ...
    stop = np.searchsorted(b[:, 0], a[:, 1], side="left")  # ... and starting before its stop
    n = np.maximum(stop - first, 0)
    which_a = np.repeat(np.arange(len(a)), n)
    which_b = expand_ranges(first, n)
    out = np.stack([np.maximum(a[which_a, 0], b[which_b, 0]), np.minimum(a[which_a, 1], b[which_b, 1])], axis=1)
    return out[out[:, 1] > out[:, 0]]


def unique_ints(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)`` of integers, by one sort: numpy 2.4's first plain ``np.unique`` imports ``numpy.ma``
    (~15 ms of a cold process's first query)."""
    s = np.sort(np.asarray(a).reshape(-1))
    if s.size > 1:
        keep = np.empty(s.size, dtype=bool)
        keep[0] = True
        np.not_equal(s[1:], s[:-1], out=keep[1:])
        s = s[keep]
    return s


def match_rows(known: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Index of each row of ``query`` in ``known`` (unique rows), -1 when absent."""
    query = np.asarray(query, dtype=np.int64)
    if len(known) == 0 or len(query) == 0:
        return np.full(len(query), -1, dtype=np.int64)
    known = np.asarray(known, dtype=np.int64).reshape(len(known), -1)
    query = query.reshape(len(query), -1)
    if known.shape[1] == query.shape[1]:
        found = _dense_match(known, query, max(1 << 20, len(known) + len(query)))
        if found is not None:
            return found
    flat = _ravel_pair(known, query)
    if flat is not None:  # one integer per row: a 1-D sort instead of np.unique(axis=0)
        fk, fq = flat
        order = np.argsort(fk, kind="stable")
        at = np.minimum(np.searchsorted(fk[order], fq), len(fk) - 1)
        return np.where(fk[order][at] == fq, order[at], -1).astype(np.int64)
    both = np.concatenate((known, query)).reshape(len(known) + len(query), -1)
    _, inv = np.unique(both, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    lut = np.full(int(inv.max()) + 1, -1, dtype=np.int64)
    lut[inv[: len(known)]] = np.arange(len(known), dtype=np.int64)
    return lut[inv[len(known):]]


def _dense_match(known: np.ndarray, query: np.ndarray, max_cells: int) -> np.ndarray | None:
    """:func:`match_rows` through a table over the bounding box of ``known`` (chunk coordinates: a few
    thousand cells) instead of a sort; None when that box has more than ``max_cells`` cells."""
    lo, hi = extremes(known)
    if float(np.prod(hi.astype(np.float64) - lo.astype(np.float64) + 1)) > max_cells:  # in floats: no overflow
        return None
    span = hi - lo + 1
    table = np.full(int(np.prod(span)), -1, dtype=np.int64)
    table[box_cells(known, lo, span)[::-1]] = np.arange(len(known) - 1, -1, -1, dtype=np.int64)  # first one wins
    inside = np.ones(len(query), dtype=bool)
    for d in range(query.shape[1]):  # compared, not subtracted: far-off rows cannot wrap into the box
        col = query[:, d]
        inside &= (col >= lo[d]) & (col <= hi[d])
    if inside.all():
        found: np.ndarray = table[box_cells(query, lo, span)]
        return found
    out = np.full(len(query), -1, dtype=np.int64)
    out[inside] = table[box_cells(query[inside], lo, span)]
    return out


def unique_rows(a: np.ndarray) -> np.ndarray:
    """``np.unique(a, axis=0)`` for int tables: a dense table over their box when it is small, else a 1-D
    sort when the values fit one int64."""
    a = np.asarray(a, dtype=np.int64)
    if len(a) == 0:
        return a.reshape(0, a.shape[1] if a.ndim == 2 else 1)
    a = a.reshape(len(a), -1)
    found = dense_ids(a, max(1 << 20, len(a)))
    if found is not None:
        return found[0]
    flat = _ravel_pair(a, a[:1])
    if flat is None:
        return np.unique(a, axis=0)
    _, first = np.unique(flat[0], return_index=True)
    return a[first]


def _ravel_pair(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Rows of two int64 tables of the same width as one int64 each (same mapping), or None
    when their value range is too wide to fit."""
    if a.shape[1] != b.shape[1]:
        return None
    if a.shape[1] == 1:
        return a[:, 0], b[:, 0]
    lo = np.minimum(a.min(axis=0), b.min(axis=0))
    hi = np.maximum(a.max(axis=0), b.max(axis=0))
    if float(np.prod(hi.astype(np.float64) - lo.astype(np.float64) + 1)) >= 2.0**62:
        return None
    span = hi - lo + 1
    shape = tuple(int(x) for x in span)
    return (np.ravel_multi_index(tuple((a - lo).T), shape).astype(np.int64),
            np.ravel_multi_index(tuple((b - lo).T), shape).astype(np.int64))


def segments(offsets: np.ndarray) -> np.ndarray:
    """Segment id of every row of a CSR ``offsets``."""
    return np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))


def sequential_edges(offsets: np.ndarray) -> np.ndarray:
    """(i, i+1) pairs inside each segment of ``offsets`` (global indices), built in place."""
    offsets = np.asarray(offsets, dtype=np.int64)
    pairs = np.maximum(np.diff(offsets) - 1, 0)
    out = np.empty((int(pairs.sum()), 2), dtype=np.int64)
    if len(out):
        expand_ranges(offsets[:-1], pairs, out=out[:, 0])
        np.add(out[:, 0], 1, out=out[:, 1])
    return out


def map_rows(rows: np.ndarray, pos_of_global: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Link rows (global rows, -1 unknown) -> (rows of result positions whose endpoints are all
    present, index of each kept row in ``rows``)."""
    if rows.size == 0:
        return np.zeros((0, rows.shape[1] if rows.ndim == 2 else 2), dtype=np.int64), np.zeros(0, np.int64)
    g = np.where(rows >= 0, rows, 0)
    out = np.where(rows >= 0, pos_of_global[g], -1)
    keep = np.flatnonzero(np.all(out >= 0, axis=1))
    return out[keep], keep
