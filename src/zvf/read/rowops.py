"""Row-index arithmetic shared by the object reads: ranges, segments, row matching.

Everything is vectorized: no loop over rows, objects or chunks.
"""

from __future__ import annotations

import numpy as np


def expand_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + n)`` for each (s, n), without a loop."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    firsts = np.cumsum(lengths) - lengths
    return np.repeat(np.asarray(starts, dtype=np.int64) - firsts, lengths) + np.arange(total, dtype=np.int64)


def match_rows(known: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Index of each row of ``query`` in ``known`` (unique rows), -1 when absent."""
    query = np.asarray(query, dtype=np.int64)
    if len(known) == 0 or len(query) == 0:
        return np.full(len(query), -1, dtype=np.int64)
    both = np.concatenate((np.asarray(known, dtype=np.int64), query)).reshape(len(known) + len(query), -1)
    _, inv = np.unique(both, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    lut = np.full(int(inv.max()) + 1, -1, dtype=np.int64)
    lut[inv[: len(known)]] = np.arange(len(known), dtype=np.int64)
    return lut[inv[len(known):]]


def segments(offsets: np.ndarray) -> np.ndarray:
    """Segment id of every row of a CSR ``offsets``."""
    return np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))


def sequential_edges(offsets: np.ndarray) -> np.ndarray:
    """(i, i+1) pairs inside each segment of ``offsets`` (global indices)."""
    n = int(offsets[-1]) if len(offsets) else 0
    if n < 2:
        return np.zeros((0, 2), dtype=np.int64)
    seg = segments(offsets)
    i = np.flatnonzero(seg[1:] == seg[:-1])
    return np.stack((i, i + 1), axis=1).astype(np.int64)


def map_rows(rows: np.ndarray, pos_of_global: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Link rows (global rows, -1 unknown) -> (rows of result positions whose endpoints are all
    present, index of each kept row in ``rows``)."""
    if rows.size == 0:
        return np.zeros((0, rows.shape[1] if rows.ndim == 2 else 2), dtype=np.int64), np.zeros(0, np.int64)
    g = np.where(rows >= 0, rows, 0)
    out = np.where(rows >= 0, pos_of_global[g], -1)
    keep = np.flatnonzero(np.all(out >= 0, axis=1))
    return out[keep], keep
