"""SWC neuron skeletons (text: ``id type x y z radius parent``, ``#`` comments).

Each tree (a root with parent -1 and its descendants) becomes one skeleton object; ``type``
(int32), ``radius`` (float64) and the file's own node ``id`` (``swc_id``, int64) are vertex
attributes, so the file written back has the same ids, parents and row order.  Header comment
lines go to the ``zvf_source`` record.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import anyio
import numpy as np

from ..errors import InputFileError
from .base import Converted, StoreOptions, Written, source_record, stamp, take_options

if TYPE_CHECKING:
    from ..read.dataset import DatasetReader


def read_swc(src: str) -> tuple[np.ndarray, list[str]]:
    """The (N, 7) table and the header comments."""
    comments: list[str] = []
    with open(src, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.startswith("#"):
                break
            comments.append(line[1:].rstrip("\n"))
    try:
        table = np.loadtxt(src, comments="#", ndmin=2)
    except ValueError as exc:
        raise InputFileError(f"{src}: not an SWC table of 7 numbers per line ({exc})") from None
    if table.size and table.shape[1] != 7:
        raise InputFileError(
            f"{src}: SWC lines have 7 fields (id type x y z radius parent), got {table.shape[1]}")
    return table.reshape(-1, 7), comments


def tree_roots(parent_row: np.ndarray) -> np.ndarray:
    """The root row of every row (pointer jumping: log(depth) vectorized steps)."""
    up = np.where(parent_row < 0, np.arange(len(parent_row)), parent_row)
    for _ in range(64):
        nxt = up[up]
        if np.array_equal(nxt, up):
            return up
        up = nxt
    raise InputFileError("SWC parents form a cycle")


def read_trees(src: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any], list[str]]:
    """(positions, (child, parent) edges, tree number of each node, attributes, header comments) of a file."""
    table, comments = read_swc(src)
    if not len(table):
        raise InputFileError(f"{src}: no nodes")
    ids = table[:, 0].astype(np.int64)
    parents = table[:, 6].astype(np.int64)
    order = np.argsort(ids)
    if np.any(np.diff(ids[order]) == 0):
        raise InputFileError(f"{src}: node ids repeat")
    has_parent = parents >= 0
    where = np.searchsorted(ids[order], parents[has_parent])
    where = np.minimum(where, len(ids) - 1)
    if np.any(ids[order][where] != parents[has_parent]):
        raise InputFileError(f"{src}: a parent id names no node")
    parent_row = np.full(len(ids), -1, np.int64)
    parent_row[has_parent] = order[where]
    roots = tree_roots(parent_row)
    _, trees = np.unique(roots, return_inverse=True)  # trees numbered by their root's row
    child = np.flatnonzero(has_parent)
    edges = np.column_stack([child, parent_row[child]])
    attrs = {"swc_id": ids, "type": table[:, 1].astype(np.int32), "radius": table[:, 5].astype(np.float64)}
    return table[:, 2:5], edges, trees.astype(np.int64), attrs, comments


async def to_store(fmt: str, src: str, dst: str, store: StoreOptions, **options: Any) -> Converted:
    return await to_store_many(fmt, [src], dst, store, **options)


async def to_store_many(fmt: str, srcs: list[str], dst: str, store: StoreOptions, **options: Any) -> Converted:
    """Files into one store, their trees numbered in file order (then by root row within a file); the
    file names and each one's tree count go to the ``zvf_source`` record."""
    take_options(fmt, options, {})
    from ..write.objects.memory import write_graph

    parts = []
    for k, src in enumerate(srcs):
        parts.append(await anyio.to_thread.run_sync(read_trees, src))
        if store.progress is not None:
            store.progress({"done": k + 1, "total": len(srcs), "unit": "files"})
    bases = np.cumsum([0] + [len(p[0]) for p in parts])
    tree_bases = np.cumsum([0] + [int(p[2].max()) + 1 for p in parts])
    edges = np.concatenate([p[1] + b for p, b in zip(parts, bases)])
    object_ids = np.concatenate([p[2] + b for p, b in zip(parts, tree_bases)])
    attrs = {k: np.concatenate([p[3][k] for p in parts]) for k in parts[0][3]}
    record: dict[str, Any] = {"format": "swc", "comments": parts[0][4]}
    if len(srcs) > 1:
        record["files"] = [os.path.basename(x) for x in srcs]
        record["trees_per_file"] = np.diff(tree_bases).tolist()
    stamp(store, record)
    s = await write_graph(dst, np.concatenate([p[0] for p in parts]), edges, geometry_type="skeleton",
                          chunk_shape=store.chunk_shape, object_ids=object_ids, attributes=attrs, dtype="float64",
                          **store.writer_kw())
    return {"vertices": s.vertex_count, "objects": s.object_count}


async def from_store(fmt: str, ds: DatasetReader, dst: str, written: Written, **options: Any) -> Converted:
    opts = take_options(fmt, options, {"level": 0})
    rec = source_record(ds, "swc")
    n = objects = 0
    next_id = 1
    # trees of several files: each file's ids shifted past those written before (ids repeat across files)
    file_starts = set(np.cumsum(rec.get("trees_per_file", [])).tolist()[:-1])
    shift = 0
    with open(dst, "w", encoding="utf-8") as fh:
        fh.writelines(f"#{line}\n" for line in rec.get("comments", ["written by zvf", "id type x y z radius parent"]))
        async for sel in written.each(ds.iter_objects(level=opts["level"]), opts["level"]):
            k = len(sel)
            if not k:
                continue
            if objects in file_starts:
                shift = next_id - 1
            ids = sel.attributes.get("swc_id")
            ids = np.arange(next_id, next_id + k) if ids is None else ids.astype(np.int64) + shift
            next_id = max(next_id, int(ids.max()) + 1)
            parent = np.full(k, -1, np.int64)
            if sel.edges is not None and len(sel.edges):
                parent[sel.edges[:, 0]] = ids[sel.edges[:, 1]]
            kind = sel.attributes.get("type", np.zeros(k, np.int32))
            radius = sel.attributes.get("radius", np.ones(k))
            order = np.argsort(ids, kind="stable")
            table = np.empty((k, 7), dtype=object)
            table[:, 0], table[:, 1], table[:, 6] = ids[order], kind[order].astype(np.int64), parent[order]
            table[:, 2:5] = sel.positions[order].astype(np.float64)
            table[:, 5] = radius[order].astype(np.float64)
            np.savetxt(fh, table, fmt="%d %d %.17g %.17g %.17g %.17g %d")
            n += k
            objects += 1
    return {"vertices": n, "objects": objects}
