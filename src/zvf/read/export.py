"""Export to files: a level written batch by batch (:mod:`zvf.read.bulk`, :mod:`zvf.read.sweep`) through the
writers of ``zvf.read.writers`` (shared with ``zvf query --out``), so no format holds the level in memory."""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import numpy as np

from ..config import tuning
from ..errors import InvalidArgumentError
from .batches import BatchStream
from .bulk import iter_chunks
from .load import LINKED, SEQUENTIAL
from .points import pick_attributes, read_chunks
from .selection import Selection
from .sweep import ObjectSweep
from .writers import check_out, format_of, link_table, open_writer

if TYPE_CHECKING:
    from .dataset import AttributeNames, DatasetReader


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
