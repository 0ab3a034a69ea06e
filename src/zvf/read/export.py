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
the level in memory.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Generic, TypeVar

import anyio
import numpy as np

from ..errors import InvalidArgumentError
from .load import LINKED
from .objects import SEQUENTIAL
from .points import pick_attributes, read_chunks
from .selection import Selection
from .writers import check_out, format_of, link_table, open_writer


class _Slot:
    __slots__ = ("done", "error", "value")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.value: Any = None
        self.error: BaseException | None = None


T = TypeVar("T")


class BatchStream(Generic[T]):
    """Batches of a bulk read, fetched ahead by a producer task; iterate once.

    ``setup()`` (awaited on first use) returns the jobs; ``fetch(job)``
    returns one batch.  With ``flatten`` each batch is a list whose items
    are yielded one by one.
    """

    def __init__(self, setup: Callable[[], Awaitable[list]], fetch: Callable[[Any], Awaitable[Any]], *,
                 prefetch: int, flatten: bool = False):
        if not isinstance(prefetch, (int, np.integer)) or prefetch < 1:
            raise InvalidArgumentError(f"prefetch must be an integer >= 1, got {prefetch!r}")
        self._setup = setup
        self._fetch = fetch
        self.prefetch = int(prefetch)
        self._flatten = flatten
        self._gen = None
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

    async def _iterate(self) -> AsyncIterator[T]:
        jobs = await self._setup()
        self.jobs_total = len(jobs)
        send, recv = anyio.create_memory_object_stream(max_buffer_size=self.prefetch)
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

    async def _produce(self, jobs: list, send, window) -> None:
        async def run(job, slot: _Slot) -> None:
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


def iter_chunks(ds, *, level: int = 0, attributes=None, prefetch: int = 4,
                batch_chunks: int = 16) -> BatchStream[Selection]:
    """Every stored chunk of a level, ``batch_chunks`` chunks per Selection, in chunk order."""
    if not isinstance(batch_chunks, (int, np.integer)) or batch_chunks < 1:
        raise InvalidArgumentError(f"batch_chunks must be an integer >= 1, got {batch_chunks!r}")
    state: dict = {}

    async def setup() -> list:
        lvl = await ds.level(level)
        state["level"] = lvl
        state["names"] = pick_attributes(lvl, attributes)
        objects = ds.has_objects(lvl.index)
        if objects:  # decode the object index once, before batches race for it
            await ds.fragment_owners(lvl.index)
        chunks = lvl.nonempty_chunks
        _size_concurrency(lvl, len(chunks) * (1 + len(state["names"]) + objects), len(state["names"]))
        return [chunks[i:i + batch_chunks] for i in range(0, len(chunks), batch_chunks)]

    async def fetch(chunks: np.ndarray) -> Selection:
        return await read_chunks(ds.context, state["level"], chunks, state["names"])

    return BatchStream(setup, fetch, prefetch=prefetch)


def _size_concurrency(level, n_requests: int, n_attributes: int) -> None:
    """Let the store-wide limit fit the whole export (cell bytes estimated from the vertex count)."""
    vert = level.array("vertices")
    if vert is None or not n_requests:
        return
    row = np.dtype(vert.meta.attributes.get("dtype", "float32")).itemsize * level.grid.ndim
    vert.executor.widen(n_requests, max(1, level.meta.vertex_count) * row * (1 + n_attributes))


def iter_objects(ds, ids=None, *, level: int = 0, attributes=None, batch: int = 256,
                 prefetch: int = 4) -> BatchStream[Selection]:
    """One Selection per object, in the order of ``ids`` (default: every object, ascending id).

    Objects are read ``batch`` at a time with ``ds.read_objects`` (each chunk
    fetched once per batch).
    """
    if not isinstance(batch, (int, np.integer)) or batch < 1:
        raise InvalidArgumentError(f"batch must be an integer >= 1, got {batch!r}")

    async def setup() -> list:
        wanted = await ds.object_ids(level=level) if ids is None else np.atleast_1d(np.asarray(ids))
        if wanted.ndim != 1:
            raise InvalidArgumentError(f"ids must be a 1-D sequence of object ids, got shape {wanted.shape}")
        return [wanted[i:i + batch] for i in range(0, len(wanted), batch)]

    async def fetch(part: np.ndarray) -> list[Selection]:
        return await ds.read_objects(part, level=level, attributes=attributes)

    return BatchStream(setup, fetch, prefetch=prefetch, flatten=True)


# --------------------------------------------------------------------------
# files
# --------------------------------------------------------------------------


async def export(ds, out: str, *, level: int = 0, fmt: str | None = None, attributes=None, prefetch: int = 4,
                 batch_chunks: int = 16, batch_objects: int = 1024,
                 progress: Callable[[dict], None] | None = None) -> dict:
    """Write a level to ``out`` (npz, csv or parquet), batch by batch; layout in ``zvf.read.writers``.

    Point clouds go chunk by chunk.  Object geometries go ``batch_objects``
    objects at a time, rows grouped by object with ``vertex_index`` (traversal
    order), and graphs, skeletons and meshes add their edges/faces table, so
    every object can be rebuilt from the files.  ``progress(summary)`` is
    called after each batch (``done``/``total`` in ``unit``).  File writes run
    in a worker thread so the next batches keep downloading meanwhile; the
    files appear under their names only once complete.  Returns vertices,
    chunks or objects, requests, bytes, seconds, MB/s (bytes fetched) and files.
    """
    fmt = format_of(out, fmt)
    check_out(out)
    if not isinstance(batch_objects, (int, np.integer)) or batch_objects < 1:
        raise InvalidArgumentError(f"batch_objects must be an integer >= 1, got {batch_objects!r}")
    t0 = time.perf_counter()
    before = ds.stats.snapshot()
    lvl = await ds.level(level)
    names = pick_attributes(lvl, attributes)
    by_object = ds.geometry_type in SEQUENTIAL | LINKED and ds.has_objects(lvl.index)
    if by_object:
        ids = await ds.object_ids(level=level)
        template = await ds.read_objects(ids[:0], level=level, attributes=names, combined=True)
        total, unit = len(ids), "objects"

        async def id_batches() -> list:
            return [ids[i:i + batch_objects] for i in range(0, len(ids), batch_objects)]

        async def read(part: np.ndarray) -> Selection:
            return await ds.read_objects(part, level=level, attributes=names, combined=True)

        stream = BatchStream(id_batches, read, prefetch=prefetch)
        step = batch_objects
    else:
        template = await read_chunks(ds.context, lvl, lvl.nonempty_chunks[:0], names)  # dtypes and shapes, no data
        total, unit = len(lvl.nonempty_chunks), "chunks"
        stream = iter_chunks(ds, level=level, attributes=names, prefetch=prefetch, batch_chunks=batch_chunks)
        step = batch_chunks
    writer = await anyio.to_thread.run_sync(open_writer, str(out), fmt, template,
                                            link_table(ds.geometry_type) if by_object else None)
    summary = {"vertices": 0, unit: 0, f"total_{unit}": total, "done": 0, "total": total, "unit": unit,
               "requests": 0, "bytes": 0, "seconds": 0.0, "mb_per_s": 0.0, "format": fmt, "out": str(out),
               "files": writer.files()}

    def update() -> None:
        now = ds.stats.snapshot()
        summary["requests"] = now["requests"] - before["requests"]
        summary["bytes"] = now["bytes"] - before["bytes"]
        summary["seconds"] = time.perf_counter() - t0
        summary["mb_per_s"] = summary["bytes"] / 1e6 / max(summary["seconds"], 1e-9)

    try:
        async with stream as batches:
            async for sel in batches:
                await anyio.to_thread.run_sync(writer.write, sel)
                summary["vertices"] += len(sel)
                summary["done"] = summary[unit] = min(total, summary["done"] + step)
                update()
                if progress is not None:
                    progress(summary)
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(writer.close)
    except BaseException:  # Ctrl-C or a failed read: nothing half-written stays behind
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(writer.abort)
        raise
    update()
    return summary
