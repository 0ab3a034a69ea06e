"""Rows compared as multisets: positions and attributes side by side, order-free, with a readable
difference on failure."""

from __future__ import annotations

import numpy as np


def rows(*columns) -> np.ndarray:
    """Columns side by side as float64 rows, sorted: a multiset of rows that compares with ``==``.

    Pass positions and their attributes to compare (point, attribute) pairs
    without relying on row order.
    """
    n = None
    parts = []
    for c in columns:
        a = np.asarray(c)
        a = a.reshape(a.shape[0], -1).astype(np.float64)
        if n is not None:
            assert a.shape[0] == n, f"columns are not row-aligned: {a.shape[0]} rows vs {n}"
        n = a.shape[0]
        parts.append(a)
    out = np.hstack(parts) if parts else np.zeros((0, 0))
    if out.shape[0] == 0:
        return out
    return out[np.lexsort(out.T[::-1])]


def assert_rows_equal(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    """Equal multisets of rows, with a readable difference on failure."""
    if actual.shape == expected.shape and np.array_equal(actual, expected):
        return
    a = {tuple(r) for r in np.asarray(actual).tolist()}
    e = {tuple(r) for r in np.asarray(expected).tolist()}
    raise AssertionError(
        f"{what}: {actual.shape[0]} rows vs {expected.shape[0]} expected; "
        f"{len(a - e)} unexpected (e.g. {sorted(a - e)[:2]}), {len(e - a)} missing (e.g. {sorted(e - a)[:2]})"
    )
