"""Every object of a level, each cell fetched about once: :class:`ObjectSweep` over the chunks, read by
``iter_objects`` (one Selection per object, a :class:`~zvf.read.batches.BatchStream`), :func:`object_batches`
(the input of the streaming writers, converters and appends) and the file export (:mod:`zvf.read.export`).
A by-id batching would fetch the cells an object spans once per batch.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, cast

import anyio
import numpy as np

from ..config import tuning
from ..errors import InvalidArgumentError
from ..format.manifest import ManifestTable
from .batches import BatchStream
from .chunkset import ChunkSet
from .objects import prepare, read_grouped, split_ranges
from .points import level_attributes, pick_attributes, row_nbytes
from .rowops import expand_ranges, match_rows, unique_rows
from .selection import Selection

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from .dataset import AttributeNames, DatasetReader
    from .load import Level


def iter_objects(ds: DatasetReader, ids: ArrayLike | None = None, *, level: int = 0,
                 attributes: AttributeNames = None, batch: int = 256,
                 prefetch: int = 4) -> BatchStream[Selection]:
    """One Selection per object, in the order of ``ids`` (default: every object, ``object_ids`` order).

    When the level's decoded cells fit in the ``sweep_bytes`` setting each cell is read
    once: every object through an :class:`ObjectSweep` (rows gathered in a few
    groups), given ids in one ``ds.read_objects`` (memory: the cells and the
    objects' rows).  Otherwise objects are read ``batch`` at a time with
    ``ds.read_objects`` (each chunk fetched once per batch).
    """
    if not isinstance(batch, (int, np.integer)) or batch < 1:
        raise InvalidArgumentError(f"batch must be an integer >= 1, got {batch!r}")
    sweep = ObjectSweep(ds, level=level, attributes=attributes, window=1, per_batch=1, cache_bytes=-1)

    async def setup() -> list[int] | list[np.ndarray]:
        lvl = await ds.level(level)
        fits = level_bytes(lvl, level_attributes(lvl, attributes)[0]) <= tuning().sweep_bytes
        if ids is None and fits and ds.has_objects(lvl.index):
            return await sweep.setup()  # jobs are window numbers
        wanted = await ds.object_ids(level=level) if ids is None else np.atleast_1d(np.asarray(ids))
        if wanted.ndim != 1:
            raise InvalidArgumentError(f"ids must be a 1-D sequence of object ids, got shape {wanted.shape}")
        step = len(wanted) if fits and len(wanted) > batch else batch
        return [wanted[i:i + step] for i in range(0, len(wanted), step)]

    async def fetch(job: int | np.ndarray) -> list[Selection]:
        if isinstance(job, int):
            return await sweep.fetch(job)
        return await ds.read_objects(job, level=level, attributes=attributes)

    return BatchStream(setup, fetch, prefetch=prefetch, flatten=True)


def level_bytes(lvl: Level, names: list[str]) -> int:
    """Decoded bytes of a level's vertices, the named attributes and a fragment id per row (estimate)."""
    arrays = [lvl.array("vertices")] + [lvl.array(f"vertex_attributes/{n}") for n in names]
    return max(1, lvl.meta.vertex_count) * (8 + sum(row_nbytes(a) for a in arrays if a is not None))


def last_chunks(chunks: np.ndarray, table: ManifestTable, n_objects: int) -> tuple[np.ndarray, np.ndarray]:
    """(rank, last): the position in ``chunks`` (store order) of the chunk of every manifest reference
    (-1: a chunk outside the listing), and of each object's last chunk (a chunk outside the listing
    counts as the first: the read of its object then names it as missing)."""
    hit = match_rows(chunks, table.coords) if len(table) else np.zeros(0, np.int64)
    off = table.object_offsets
    last = np.zeros(n_objects, np.int64)
    has = np.flatnonzero(np.diff(off))
    if len(has):
        last[has] = np.maximum.reduceat(np.maximum(hit, 0), off[has])
    return hit, last


class ObjectSweep:
    """Every object of a level, each cell fetched once (or nearly), in bounded memory.

    Chunks are visited in store order (``nonempty_chunks``) in windows of
    ``window`` chunks; an object is emitted with the window holding the last
    of its chunks (by the manifests), so when it is read every chunk it needs
    has been fetched already or is fetched now.  One :class:`ChunkSet` serves
    consecutive windows; it is dropped and started afresh once the chunks no
    later object needs ("dead") outnumber both the ones still needed ("live")
    and ``keep`` chunks (``cache_bytes`` of decoded cells, estimated from the
    level's vertex count, at least two windows).  Hence:

    * requests: those of ``iter_chunks`` when the level's cells fit in
      ``cache_bytes``; never more than twice them (a chunk is fetched again
      only when live at a restart, and a restart waits for at least as many
      dead chunks as there are live ones);
    * memory: the decoded cells of the live chunks -- those of objects that
      straddle the sweep front, about two slabs of the chunk grid for objects
      spanning neighbouring chunks -- plus at most as many dead ones or
      ``keep``, one window's new cells, and the rows of one window's objects
      (emitted in runs of at most ``per_batch`` objects).

    When the whole level fits in ``cache_bytes`` (or ``cache_bytes`` is
    negative: the caller checked it fits) it is one window: every cell
    is read once, up front, and the objects' rows are gathered in
    ``sweep_whole_groups`` groups in ``object_ids`` order, as ``read_objects``
    batches of them would come (memory: the cells plus one group's rows,
    indices and connectivity, well under twice ``cache_bytes``).  Otherwise
    objects come grouped by window, in ``object_ids`` order inside one.
    Windows (groups) run one after the other, as they share the ChunkSet; the
    consumer of a :class:`BatchStream` still overlaps its work with the reads.
    """

    def __init__(self, ds: DatasetReader, *, level: int, attributes: AttributeNames, window: int, per_batch: int,
                 cache_bytes: int | None = None, links: bool = True):
        self.ds, self.level, self.attributes, self.links = ds, level, attributes, links
        self.window, self.per_batch = int(window), int(per_batch)
        self.cache_bytes = tuning().sweep_bytes if cache_bytes is None else int(cache_bytes)  # < 0: one window, always
        self.keep = 2 * self.window  # dead chunks tolerated besides as many as are live (set in setup)
        self.batches: list[np.ndarray] = []  # manifest rows of each window's objects
        self.preloaded = False  # the ChunkSet holds every chunk the manifests name (set in setup)

    async def setup(self) -> list[int]:
        rc = self.ds.context
        lvl, self.names, _, self.cs = await prepare(rc, self.level, self.attributes, links=True, table=False)
        self.cs.sweep = True
        chunks = lvl.nonempty_chunks
        self.keep = max(2 * self.window, int(self.cache_bytes * max(1, len(chunks)) // level_bytes(lvl, self.names)))
        self.whole = self.keep >= len(chunks) or self.cache_bytes < 0
        # a level read whole downloads its cells while its object index is decoded
        load = [self.cs.load(chunks)] if self.whole and len(chunks) else []
        got = await rc.ex.gather([rc.manifests(lvl.index), *load])
        # one gather of the manifests and the loads (None): its result type cannot tell them apart
        self.oids, self.table = cast("tuple[np.ndarray, ManifestTable]", got[0])
        table = self.table
        hit, last = last_chunks(chunks, table, len(self.oids))
        rank = np.maximum(hit, 0)
        self.preloaded = bool(load) and not (hit < 0).any()  # every chunk a manifest names is in
        self.off = table.object_offsets
        if self.whole:  # every cell fits: one window, objects in ``object_ids`` order
            self.window = max(1, len(chunks))
        window_of = last // self.window
        order = np.argsort(window_of, kind="stable")
        cuts = np.flatnonzero(np.diff(window_of[order])) + 1
        if self.whole:  # rows gathered a few groups at a time, over cells read once up front
            group = max(self.per_batch, -(-len(order) // tuning().sweep_whole_groups))
            cuts = np.arange(group, len(order), group)
        self.batches = np.split(order, cuts) if len(order) else []
        self.window_ids = [int(window_of[b[0]]) for b in self.batches]
        ref_window = window_of[table.object_row]
        self.free_after = np.full(max(len(chunks), 1), -1, np.int64)  # last window needing each chunk
        np.maximum.at(self.free_after, rank, ref_window)
        self.held = np.zeros(len(self.free_after), bool)  # chunks the current ChunkSet holds
        self.rank = rank
        self.turn = [anyio.Event() for _ in self.batches]
        return list(range(len(self.batches)))

    async def fetch(self, k: int) -> list[Selection]:
        if k:
            await self.turn[k - 1].wait()
        try:
            return await self._read(k)
        finally:
            self.turn[k].set()

    async def _read(self, k: int) -> list[Selection]:
        rows, w = self.batches[k], self.window_ids[k]
        if self.whole and k == 0 and len(self.table) and not self.preloaded:
            await self.cs.load(unique_rows(self.table.coords))
        dead = self.held & (self.free_after < w)
        if dead.sum() > max(int((self.held & ~dead).sum()), self.keep):  # start afresh
            cs = self.cs
            self.cs = ChunkSet(self.ds.context, cs.level, cs.names, cs.links, False, category=cs.category)
            self.cs.sweep = True
            self.held[:] = False
            self.preloaded = False
        t, lens = self.table, self.off[rows + 1] - self.off[rows]
        refs = expand_ranges(self.off[rows], lens)
        sub = ManifestTable(np.repeat(np.arange(len(rows), dtype=np.int64), lens), t.block[refs], t.coords[refs],
                            t.fragment[refs], len(rows))
        g = await read_grouped(self.ds.context, self.cs, self.oids[rows], sub, loaded=self.preloaded, links=self.links)
        self.held[self.rank[refs]] = True
        cuts = np.unique(np.r_[np.arange(0, len(rows), self.per_batch), len(rows)])
        return split_ranges(g, cuts)


async def object_batches(ds: DatasetReader, *, level: int = 0, attributes: AttributeNames = None,
                         batch: int = 4096) -> AsyncIterator[Selection]:
    """Every object of a level, in ``object_ids`` order, as combined Selections of up to ``batch`` whole
    objects (the input of the streaming writers, converters and appends).

    A level whose decoded cells fit in the ``sweep_bytes`` setting goes through one :class:`ObjectSweep` (each
    cell read once); a larger one ``batch`` ids at a time with ``ds.read_objects`` (each batch fetches
    the cells its objects touch), as only that keeps id order in bounded memory.
    """
    lvl = await ds.level(level)
    names = pick_attributes(lvl, attributes)
    if level_bytes(lvl, names) <= tuning().sweep_bytes:
        sweep = ObjectSweep(ds, level=level, attributes=names, window=1, per_batch=batch, cache_bytes=-1)
        stream: BatchStream[Selection] = BatchStream(sweep.setup, sweep.fetch, prefetch=2, flatten=True)
        async with stream as batches:
            async for sel in batches:
                yield sel
        return
    ids = await ds.object_ids(level=level)
    for lo in range(0, len(ids), batch):
        yield await ds.read_objects(ids[lo:lo + batch], level=level, attributes=names, combined=True)
