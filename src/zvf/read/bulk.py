"""Every chunk of a level as a :class:`~zvf.read.batches.BatchStream` of Selections, ``batch_chunks``
chunks at a time in chunk order (``iter_chunks``; the file export of point clouds).  Every object of a
level is :mod:`zvf.read.sweep`'s: a point cloud's bulk read never loads the object readers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InvalidArgumentError
from .batches import BatchStream
from .load import SEQUENTIAL
from .points import fragment_indexes, pick_attributes, read_chunks, size_concurrency
from .selection import Selection

if TYPE_CHECKING:
    from .dataset import AttributeNames, DatasetReader
    from .load import Level


def iter_chunks(ds: DatasetReader, *, level: int = 0, attributes: AttributeNames = None, prefetch: int = 4,
                batch_chunks: int = 16) -> BatchStream[Selection]:
    """Every stored chunk of a level, ``batch_chunks`` chunks per Selection, in chunk order."""
    if not isinstance(batch_chunks, (int, np.integer)) or batch_chunks < 1:
        raise InvalidArgumentError(f"batch_chunks must be an integer >= 1, got {batch_chunks!r}")
    state: dict[str, Any] = {}  # the level and its attribute names, once setup has read them

    async def setup() -> list[np.ndarray]:
        lvl = await ds.level(level)
        state["level"] = lvl
        state["names"] = pick_attributes(lvl, attributes)
        objects = ds.has_objects(lvl.index)
        if objects:  # decode the object index once, before batches race for it
            await ds.fragment_owners(lvl.index)
        chunks = lvl.nonempty_chunks
        size_concurrency(lvl, len(chunks) * (1 + len(state["names"]) + objects), len(state["names"]))
        return [chunks[i:i + batch_chunks] for i in range(0, len(chunks), batch_chunks)]

    async def fetch(chunks: np.ndarray) -> Selection:
        lvl = state["level"]
        if lvl.needs_chunkset():  # category axis or Draco cells: rows as read_all lays them out
            from .box import read_rows  # here: through a ChunkSet, which other levels never load

            return await read_rows(ds.context, level, attributes, chunks=chunks)
        if lvl.meta.shared_fragments and ds.geometry_type in SEQUENTIAL:
            return await _shared_chunks(ds, lvl, chunks, state["names"])
        return await read_chunks(ds.context, lvl, chunks, state["names"], sweep=True)

    return BatchStream(setup, fetch, prefetch=prefetch)


async def _shared_chunks(ds: DatasetReader, lvl: Level, chunks: np.ndarray, names: list[str]) -> Selection:
    """Rows of ``chunks`` on a level whose polylines share vertices (a pyramid's coarse levels): each
    fragment's rows once per object through it, labelled with that object, objects ascending in a chunk --
    what ``read_all`` and ``select(level=).read()`` return, where a fragment's single owner would be
    any one of its objects."""
    rc = ds.context
    cells = await rc.ex.gather([read_chunks(rc, lvl, c[None, :], names, sweep=True) for c in chunks])
    fis = await fragment_indexes(lvl.need("vertex_fragments"), [tuple(c) for c in chunks.tolist()])
    oids, table = await rc.manifests(lvl.index)
    key = f"{lvl.index}/vertex_fragments"
    parts: list[Selection] = []
    for chunk, cell, fi in zip(chunks, cells, fis):
        refs = np.flatnonzero(np.all(table.coords == chunk, axis=1))
        ref_ids = oids[table.object_row[refs]]
        order = np.lexsort((table.fragment[refs], ref_ids))
        rows, lengths = fi.gather(table.fragment[refs][order], key=key)
        parts.append(Selection(cell.positions[rows], {k: v[rows] for k, v in cell.attributes.items()},
                               np.repeat(ref_ids[order], lengths)))
    if not parts:
        return await read_chunks(rc, lvl, chunks, names)
    return Selection(np.concatenate([p.positions for p in parts]),
                     {k: np.concatenate([p.attributes[k] for p in parts]) for k in parts[0].attributes},
                     np.concatenate([p.object_ids for p in parts]))
