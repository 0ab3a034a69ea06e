"""Acceptance tests of zvf's point-cloud foundation (fixtures, compatibility, S3, errors, facade).

Shared helpers for these tests live here; fixtures are in ``conftest.py``.
"""

from __future__ import annotations

import json

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


def without_section(files: dict[str, bytes]) -> dict[str, bytes]:
    """``files`` with the root as 0.9.2 writes it.

    zvf's default writes add only zarr-python's ``consolidated_metadata`` to the root
    (every document, so an open takes one wave); checked here to hold exactly the
    store's documents.
    """
    from zvf.format.builders import dumps

    doc = json.loads(files["zarr.json"])
    section = doc.pop("consolidated_metadata")["metadata"]
    docs = {k[:-len("/zarr.json")]: json.loads(v) for k, v in files.items() if k.endswith("/zarr.json")}
    assert section == docs
    return {**files, "zarr.json": dumps(doc)}


def unwrap_cell(value) -> bytes:
    """The bytes plain zarr-python returns for one vlen-bytes cell (nested 0-d object arrays)."""
    while isinstance(value, np.ndarray) and value.dtype == object:
        value = value[()]
    if isinstance(value, np.ndarray):
        return value.tobytes()  # an |S<n> array keeps trailing NUL bytes, np.bytes_ would drop them
    return bytes(value)


def assert_overwrite_needed(url: str, opts: dict, pos: np.ndarray, bounds) -> None:
    """A second write to an existing store is refused until ``overwrite=True``, which replaces it."""
    import pytest

    import zvf
    from zvf.errors import StoreExistsError

    zvf.write_points(url, pos, storage_options=opts, chunk_shape=(60.0,) * 3, bounds=bounds)
    with pytest.raises(StoreExistsError, match="overwrite=True"):
        zvf.write_points(url, pos[:5], storage_options=opts, chunk_shape=(60.0,) * 3, bounds=bounds)
    zvf.write_points(url, pos[:5], storage_options=opts, chunk_shape=(60.0,) * 3, bounds=bounds, overwrite=True)
    with zvf.open(url, storage_options=opts) as ds:
        assert len(ds.read_all()) == 5
