"""The tables of a Selection as named columns: what export files, ``Selection.to_arrow`` /
``to_pandas`` and the Dask export share (README "Export files")."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from .selection import Selection

LINK_TABLES = ("edges", "faces")


def vertex_arrays(sel: Selection) -> dict[str, np.ndarray]:
    """The vertex table of a batch, keyed as in the NPZ file."""
    out = {"positions": sel.positions}
    if sel.object_ids is not None:
        out["object_ids"] = sel.object_ids
        if sel.offsets is not None:
            starts = np.repeat(sel.offsets[:-1], np.diff(sel.offsets))
            out["vertex_index"] = np.arange(len(sel), dtype=np.int64) - starts
    out.update((f"attr_{k}", v) for k, v in sel.attributes.items())
    return out


def link_arrays(sel: Selection, table: str) -> dict[str, np.ndarray]:
    """The edges/faces table of a batch: rows grouped by object (stable), indices local to it.

    Links whose endpoints lie in different objects are left out, as ``read_object`` does.
    """
    conn = getattr(sel, table)
    if conn is None:
        conn = np.zeros((0, 3 if table == "faces" else 2), np.int64)
    offsets = sel.offsets if sel.offsets is not None else np.array([0, len(sel)], np.int64)
    seg = np.searchsorted(offsets, conn, side="right") - 1
    keep = np.flatnonzero(np.all(seg == seg[:, :1], axis=1))
    keep = keep[np.argsort(seg[keep, 0], kind="stable")]
    owner = seg[keep, 0]
    if sel.objects is not None:
        oids = sel.objects[owner]
    elif sel.object_ids is not None:
        oids = sel.object_ids[conn[keep, 0]]
    else:
        oids = np.zeros(len(keep), np.int64)
    out = {table: conn[keep] - offsets[owner][:, None], f"{table}_object_ids": oids.astype(np.int64)}
    out.update((f"{table}_attr_{k}", v[keep]) for k, v in sel.link_attributes.items())
    return out


def flat_columns(arrays: dict[str, np.ndarray]) -> list[tuple[str, np.ndarray]]:
    """CSV/Parquet columns of a table: one 1-D column per coordinate, channel and link corner."""
    cols: list[tuple[str, np.ndarray]] = []
    for key, a in arrays.items():
        if key == "positions":
            ndim = a.shape[1]
            names = ["x", "y", "z", "w"][:ndim] if ndim <= 4 else [f"d{i}" for i in range(ndim)]
            cols.extend((n, a[:, i]) for i, n in enumerate(names))
        elif key in LINK_TABLES:
            cols.extend((f"v{i}", a[:, i]) for i in range(a.shape[1]))
        elif key.endswith("object_ids"):
            cols.append(("object_id", a))
        elif key.endswith("group_ids"):
            cols.append(("group_id", a))
        elif key == "vertex_index":
            cols.append((key, a))
        else:
            name = key.split("attr_", 1)[1]
            if a.ndim == 1:
                cols.append((name, a))
            else:
                flat = a.reshape(len(a), int(np.prod(a.shape[1:])))  # (0, C) too
                cols.extend((f"{name}_{i}", flat[:, i]) for i in range(flat.shape[1]))
    names = [n for n, _ in cols]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise InvalidArgumentError(f"attribute names {clash} clash with the export's own columns; "
                                   f"export them to .npz, or leave them out with attributes=[...]")
    return cols
