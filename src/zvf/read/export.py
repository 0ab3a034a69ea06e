"""Bulk export: every chunk (or object) of a level as a stream of batches, and to files.

``iter_chunks`` / ``iter_objects`` return a :class:`BatchStream`: an async
iterable whose batches are fetched ahead by a producer task -- at most
``prefetch`` batches requested or ready but not yet handed to the consumer,
so memory stays bounded however big the store is -- and yielded in store
order.  The producer runs as its own task (not in a task group held open
across ``yield``), so a consumer may stop early from any task; ``async with``
stops the prefetching at once::

    async for sel in ds.iter_chunks():            # runs to the end
        ...
    async with ds.iter_chunks() as batches:       # may break early
        async for sel in batches:
            ...

:func:`export` writes a level batch by batch through the writers of
``zvf.read.writers`` (shared with ``zvf query --out``), so no format holds
the level in memory.  Every object of a level is read by one
:class:`ObjectSweep` over its chunks, each cell fetched about once (a
by-id batching would fetch the cells an object spans once per batch).
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

import anyio
import numpy as np

from ..config import tuning
from ..errors import InvalidArgumentError
from ..format.manifest import ManifestTable
from .box import needs_chunkset, read_rows
from .chunkset import ChunkSet
from .load import LINKED
from .objects import SEQUENTIAL, level_attributes, prepare, read_grouped, split_ranges
from .points import fragment_indexes, pick_attributes, read_chunks, row_nbytes, size_concurrency
from .rowops import expand_ranges, match_rows, unique_rows
from .selection import Selection
from .writers import check_out, format_of, link_table, open_writer

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectSendStream
    from numpy.typing import ArrayLike

    from .dataset import AttributeNames, DatasetReader
    from .load import Level


class _Slot:
    __slots__ = ("done", "error", "value")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.value: Any = None
        self.error: BaseException | None = None


T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Batches(Protocol[T_co]):
    """What a bulk read returns: batches for ``async for``, once; ``async with`` or ``aclose()`` stops it early."""

    def __aiter__(self) -> AsyncIterator[T_co]: ...

    async def __aenter__(self) -> AsyncIterator[T_co]: ...

    async def __aexit__(self, *exc: object) -> None: ...

    async def aclose(self) -> None: ...


class BatchStream(Generic[T]):
    """Batches of a bulk read, fetched ahead by a producer task; iterate once.

    ``setup()`` (awaited on first use) returns the jobs; ``fetch(job)``
    returns one batch.  With ``flatten`` each batch is a list whose items
    are yielded one by one.
    """

    def __init__(self, setup: Callable[[], Awaitable[list[Any]]], fetch: Callable[[Any], Awaitable[Any]], *,
                 prefetch: int, flatten: bool = False):
        if not isinstance(prefetch, (int, np.integer)) or prefetch < 1:
            raise InvalidArgumentError(f"prefetch must be an integer >= 1, got {prefetch!r}")
        self._setup = setup
        self._fetch = fetch
        self.prefetch = int(prefetch)
        self._flatten = flatten
        self._gen: AsyncGenerator[T] | None = None
        self.jobs_total: int | None = None  # known once iteration has started
        self.jobs_done = 0

    def __aiter__(self) -> AsyncIterator[T]:
        if self._gen is None:
            self._gen = self._iterate()
        return self._gen

    async def __aenter__(self) -> AsyncIterator[T]:
        return self.__aiter__()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop prefetching and wait until no request of this stream is in flight."""
        if self._gen is not None:
            await self._gen.aclose()

    async def _iterate(self) -> AsyncGenerator[T]:
        jobs = await self._setup()
        self.jobs_total = len(jobs)
        send, recv = anyio.create_memory_object_stream[_Slot](max_buffer_size=self.prefetch)
        window = anyio.Semaphore(self.prefetch)
        # Its own task: a task group entered here would stay open across ``yield`` and bind
        # the consumer's task to its cancel scope.
        producer = asyncio.get_running_loop().create_task(self._produce(jobs, send, window))
        try:
            async with recv:
                async for slot in recv:
                    await slot.done.wait()
                    window.release()
                    if slot.error is not None:
                        raise slot.error
                    self.jobs_done += 1
                    value, slot.value = slot.value, None
                    if self._flatten:
                        for item in value:
                            yield item
                    else:
                        yield value
        finally:
            producer.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.wait({producer})

    async def _produce(self, jobs: list[Any], send: MemoryObjectSendStream[_Slot], window: anyio.Semaphore) -> None:
        async def run(job: Any, slot: _Slot) -> None:
            try:
                slot.value = await self._fetch(job)
            except Exception as exc:  # handed to the consumer in order
                slot.error = exc
            finally:
                slot.done.set()

        try:
            async with send, anyio.create_task_group() as tg:
                for job in jobs:
                    await window.acquire()
                    slot = _Slot()
                    tg.start_soon(run, job, slot)
                    await send.send(slot)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the consumer went away


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
        if needs_chunkset(lvl):  # category axis or Draco cells: rows as read_all lays them out
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


# --------------------------------------------------------------------------
# every object of a level: one sweep over the chunks
# --------------------------------------------------------------------------


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


# --------------------------------------------------------------------------
# files
# --------------------------------------------------------------------------


async def object_tables(ds: DatasetReader, level: int) -> dict[str, dict[str, np.ndarray]]:
    """The whole tables an export adds for a level's objects (``zvf.read.writers``): ``objects`` (id and
    object attributes, when it has some) and ``groups`` (one row per membership, -1 for an empty group,
    with the group's attributes), keyed as in the NPZ file.  Dense arrays: one read each."""
    out: dict[str, dict[str, np.ndarray]] = {}
    lvl = await ds.family(level, "object_attributes")
    names = lvl.named("object_attributes")
    if names:
        objects = {"objects_object_ids": (await ds.object_ids(level=level)).astype(np.int64)}
        for name in names:
            objects[f"objects_attr_{name}"] = await ds.object_attribute(name, level=level)
        out["objects"] = objects
    groups = await ds.groups(level=level)
    if groups:
        members = [np.asarray(g, np.int64) if len(g) else np.array([-1], np.int64) for g in groups]
        rows = np.array([len(m) for m in members], np.int64)
        table = {"groups_group_ids": np.repeat(np.arange(len(groups), dtype=np.int64), rows),
                 "groups_object_ids": np.concatenate(members)}
        await ds.family(level, "group_attributes")
        for name in lvl.named("group_attributes"):
            table[f"groups_attr_{name}"] = np.repeat(await ds.group_attribute(name, level=level), rows, axis=0)
        out["groups"] = table
    return out


def batch_nbytes(sel: Selection) -> int:
    """The bytes of a batch's vertex columns (its positions and attributes)."""
    return int(sel.positions.nbytes) + sum(int(a.nbytes) for a in sel.attributes.values())


class WriterThread:
    """Batches written to a file by a thread of its own, fed from the event loop through a queue of at most
    ``ahead`` bytes of rows (and always one batch).

    Each write starts as soon as the one before ends: a write handed over per batch (``to_thread``)
    waits, between batches, for the loop to come round, and the loop is busy with the reads' CPU work
    (a whole-level export spent half its writing time waiting so).  ``written(sel)`` is called on the
    loop, in the feeding task, for every batch written (so an error it raises reaches the feeder).
    """

    def __init__(self, writer: Any, *, written: Callable[[Selection], None], ahead: int | None = None):
        self._loop = asyncio.get_running_loop()
        # enough for the writer to keep going while the loop reads; not so much that a slow disk piles batches up
        self._ahead = tuning().export_write_ahead_bytes if ahead is None else ahead
        self._queued = 0  # bytes queued or being written
        self._room = asyncio.Event()
        self._todo: queue.SimpleQueue[tuple[Selection, int] | None] = queue.SimpleQueue()  # (batch, its bytes)
        self._stopping = threading.Event()
        self._ended: asyncio.Future[None] = self._loop.create_future()
        self._done: list[Selection] = []
        self._writer = writer
        self._written = written
        threading.Thread(target=contextvars.copy_context().run, args=(self._run,), name="zvf-file-writer",  # tuned()
                         daemon=True).start()

    def _run(self) -> None:
        error: BaseException | None = None
        try:
            while (job := self._todo.get()) is not None and not self._stopping.is_set():
                self._writer.write(job[0])
                self._loop.call_soon_threadsafe(self._one_written, *job)
        except BaseException as exc:  # handed to the feeder
            error = exc
        self._loop.call_soon_threadsafe(self._end, error)

    def _one_written(self, sel: Selection, size: int) -> None:
        self._queued -= size
        self._done.append(sel)
        self._room.set()

    def _end(self, error: BaseException | None) -> None:
        if error is None:
            self._ended.set_result(None)
        else:
            self._ended.set_exception(error)
        self._room.set()  # a feeder waiting for room learns of the end

    def _report(self) -> None:
        done, self._done = self._done, []
        for sel in done:
            self._written(sel)

    async def put(self, sel: Selection) -> None:
        """Queue one batch, once there is room; raises the writer's error if it failed."""
        size = batch_nbytes(sel)
        while self._queued and self._queued + size > self._ahead and not self._ended.done():
            self._room.clear()
            await self._room.wait()
            self._report()
        self._report()
        if self._ended.done():
            await self._ended  # the writer failed: its error
        self._queued += size
        self._todo.put((sel, size))

    async def drain(self) -> None:
        """Wait until every queued batch is written (raises the writer's error)."""
        self._todo.put(None)
        await asyncio.wait({self._ended})  # not the future itself: a cancelled caller must not cancel it
        self._report()
        await self._ended

    async def stop(self) -> None:
        """Drop the batches not yet written and wait for the thread to end (the caller shields this)."""
        self._stopping.set()
        self._todo.put(None)
        await asyncio.wait({self._ended})
        if not self._ended.cancelled():
            self._ended.exception()  # retrieved: what propagates is the caller's own error


async def export(ds: DatasetReader, out: str, *, level: int = 0, fmt: str | None = None,
                 attributes: AttributeNames = None, prefetch: int = 4, batch_chunks: int = 16,
                 batch_objects: int = 1024,
                 progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Write a level to ``out`` (npz, csv, parquet or json; ``-``: stdout), batch by batch; layout in
    ``zvf.read.writers``.

    Point clouds go ``batch_chunks`` chunks at a time.  Object geometries go
    by one :class:`ObjectSweep` over the chunks (each cell read about once;
    batches of at most ``batch_objects`` objects in ``object_ids`` order when
    the level fits the sweep's cache, else grouped by windows of
    ``batch_chunks`` chunks), rows grouped by
    object with ``vertex_index`` (traversal order), and graphs, skeletons and
    meshes add their edges/faces table, so every object can be rebuilt from
    the files.  ``progress(summary)`` is called after each batch is written
    (``done``/``total`` in ``unit``).  File writes run in a thread of their
    own (:class:`WriterThread`, up to ``export_write_ahead_bytes`` of rows queued
    for it) so the next batches keep downloading and decoding meanwhile;
    the files appear under their names only once complete.  Returns
    vertices, chunks or objects, requests, bytes, seconds, MB/s (bytes
    fetched) and files.
    """
    fmt = format_of(out, fmt)
    check_out(out, fmt)
    for name, v in (("batch_chunks", batch_chunks), ("batch_objects", batch_objects)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise InvalidArgumentError(f"{name} must be an integer >= 1, got {v!r}")
    t0 = time.perf_counter()
    before = ds.stats.snapshot()
    lvl = await ds.level(level)
    names = pick_attributes(lvl, attributes)
    by_object = ds.geometry_type in SEQUENTIAL | LINKED and ds.has_objects(lvl.index)
    links = link_table(ds.geometry_type) if by_object else None
    extra = await object_tables(ds, level) if ds.has_objects(lvl.index) else {}
    check_out(out, fmt, [t for t in (links, *extra) if t])  # its companions too, and whether stdout takes them
    if by_object:
        template = await ds.read_objects(np.zeros(0, np.int64), level=level, attributes=names, combined=True)
        total, unit = len(await ds.object_ids(level=level)), "objects"
        # whole polylines need no edges: ``vertex_index`` is their order
        sweep = ObjectSweep(ds, level=level, attributes=names, window=batch_chunks, per_batch=batch_objects,
                            links=links is not None)
        stream: BatchStream[Selection] = BatchStream(sweep.setup, sweep.fetch, prefetch=prefetch, flatten=True)
    else:
        template = await read_chunks(ds.context, lvl, lvl.nonempty_chunks[:0], names)  # dtypes and shapes, no data
        total, unit = len(lvl.nonempty_chunks), "chunks"
        stream = iter_chunks(ds, level=level, attributes=names, prefetch=prefetch, batch_chunks=batch_chunks)
    # the level's vertex count, when right (every zvf-written level 0), lets an .npz be written in place
    writer = await anyio.to_thread.run_sync(open_writer, str(out), fmt, template, links,
                                            max(0, int(lvl.meta.vertex_count)), tuple(extra))
    summary: dict[str, Any] = {"vertices": 0, unit: 0, f"total_{unit}": total, "done": 0, "total": total, "unit": unit,
               "requests": 0, "bytes": 0, "seconds": 0.0, "mb_per_s": 0.0, "format": fmt, "out": str(out),
               "files": writer.files()}

    def update() -> None:
        now = ds.stats.snapshot()
        summary["requests"] = now["requests"] - before["requests"]
        summary["bytes"] = now["bytes"] - before["bytes"]
        summary["seconds"] = time.perf_counter() - t0
        summary["mb_per_s"] = summary["bytes"] / 1e6 / max(summary["seconds"], 1e-9)

    def written(sel: Selection) -> None:
        summary["vertices"] += len(sel)
        step = len(sel.objects) if by_object and sel.objects is not None else batch_chunks
        summary["done"] = summary[unit] = min(total, summary["done"] + step)
        update()
        if progress is not None:
            progress(summary)

    feed = WriterThread(writer, written=written)
    try:
        async with stream as batches:
            async for sel in batches:
                await feed.put(sel)
        await feed.drain()
        for table, arrays in extra.items():
            await anyio.to_thread.run_sync(writer.write_table, table, arrays)
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(writer.close)
    except BaseException:  # Ctrl-C or a failed read: nothing half-written stays behind
        with anyio.CancelScope(shield=True):
            await feed.stop()
            await anyio.to_thread.run_sync(writer.abort)
        raise
    update()
    return summary
