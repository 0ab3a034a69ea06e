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

:func:`export` writes a level to ``.csv`` / ``.parquet`` batch by batch and
to ``.npz`` through one temporary file per column (zipped at the end), so
no format holds the level in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
import zipfile
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import numpy as np

from ..errors import InvalidArgumentError
from .points import pick_attributes, read_chunks
from .selection import Selection

FORMATS = ("npz", "csv", "parquet")
CSV_ROWS = 65536  # rows formatted at once (bounds the Python objects made per step)


class _Slot:
    __slots__ = ("done", "value", "error")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class BatchStream:
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

    def __aiter__(self):
        if self._gen is None:
            self._gen = self._iterate()
        return self._gen

    async def __aenter__(self):
        return self.__aiter__()

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop prefetching and wait until no request of this stream is in flight."""
        if self._gen is not None:
            await self._gen.aclose()

    async def _iterate(self):
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


def iter_chunks(ds, *, level: int = 0, attributes=None, prefetch: int = 4, batch_chunks: int = 16) -> BatchStream:
    """Every stored chunk of a level, ``batch_chunks`` chunks per Selection, in chunk order."""
    if not isinstance(batch_chunks, (int, np.integer)) or batch_chunks < 1:
        raise InvalidArgumentError(f"batch_chunks must be an integer >= 1, got {batch_chunks!r}")
    state: dict = {}

    async def setup() -> list:
        lvl = await ds.level(level)
        state["level"] = lvl
        state["names"] = pick_attributes(lvl, attributes)
        if ds.has_objects(lvl.index):  # decode the object index once, before batches race for it
            await ds.fragment_owners(lvl.index)
        chunks = lvl.nonempty_chunks
        return [chunks[i:i + batch_chunks] for i in range(0, len(chunks), batch_chunks)]

    async def fetch(chunks: np.ndarray) -> Selection:
        return await read_chunks(ds, state["level"], chunks, state["names"])

    return BatchStream(setup, fetch, prefetch=prefetch)


def iter_objects(ds, ids=None, *, level: int = 0, attributes=None, batch: int = 256,
                 prefetch: int = 4) -> BatchStream:
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


def format_of(out: str, fmt: str | None) -> str:
    """The export format: ``fmt`` or OUT's suffix."""
    if fmt is None:
        fmt = os.path.splitext(str(out))[1].lower().lstrip(".")
        if fmt not in FORMATS:
            raise InvalidArgumentError(f"cannot tell the format of {str(out)!r}: end it in .npz, .csv or .parquet, "
                                       f"or pass the format")
    if fmt not in FORMATS:
        raise InvalidArgumentError(f"format must be one of {FORMATS}, got {fmt!r}")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise InvalidArgumentError("Parquet export needs pyarrow, which is not installed "
                                       "(pip install pyarrow), or export to .npz / .csv") from None
    return fmt


def columns(sel: Selection) -> list[tuple[str, np.ndarray]]:
    """Flat named columns of a batch: coordinates, object id, attribute channels."""
    ndim = sel.positions.shape[1]
    names = ["x", "y", "z", "w"][:ndim] if ndim <= 4 else [f"d{i}" for i in range(ndim)]
    cols = [(n, sel.positions[:, i]) for i, n in enumerate(names)]
    if sel.object_ids is not None:
        cols.append(("object_id", sel.object_ids))
    for name, values in sel.attributes.items():
        flat = values.reshape(len(values), int(np.prod(values.shape[1:], dtype=np.int64)))
        if values.ndim == 1:
            cols.append((name, values))
        else:
            cols.extend((f"{name}_{i}", flat[:, i]) for i in range(flat.shape[1]))
    return cols


class CsvOut:
    """CSV, one row per vertex; floats as %.9g (float32 round-trips), integers exact."""

    def __init__(self, path: str, template: Selection):
        self.fh = open(path, "w", newline="")  # noqa: SIM115 - closed in close()
        cols = columns(template)
        self.fh.write(",".join(n for n, _ in cols) + "\n")
        self.row_fmt = ",".join(_cell_format(c.dtype) for _, c in cols) + "\n"

    def write(self, sel: Selection) -> None:
        cols = [c for _, c in columns(sel)]
        for a in range(0, len(sel), CSV_ROWS):
            part = [c[a:a + CSV_ROWS].tolist() for c in cols]
            n = len(part[0])
            self.fh.write((self.row_fmt * n) % tuple(v for row in zip(*part) for v in row))

    def close(self) -> None:
        self.fh.close()


def _cell_format(dtype: np.dtype) -> str:
    if dtype.kind in "iub":
        return "%d"
    return "%.9g" if dtype.itemsize <= 4 else "%.17g"


class NpzOut:
    """``.npz`` like ``zvf query --out``: positions, attr_<name>, object_ids.

    Columns are appended to one temporary file each while batches arrive and
    zipped (with .npy headers) at the end, so memory stays one batch.
    """

    def __init__(self, path: str, template: Selection):
        self.path = path
        self.tmp = tempfile.TemporaryDirectory(prefix="zvf-export-", dir=os.path.dirname(os.path.abspath(path)))
        self.arrays = {"positions": template.positions,
                       **{f"attr_{k}": v for k, v in template.attributes.items()}}
        if template.object_ids is not None:
            self.arrays["object_ids"] = template.object_ids
        self.meta = {k: (v.dtype, v.shape[1:]) for k, v in self.arrays.items()}
        self.files = {k: open(os.path.join(self.tmp.name, f"{i}.bin"), "w+b")  # noqa: SIM115
                      for i, k in enumerate(self.arrays)}
        self.rows = 0

    def write(self, sel: Selection) -> None:
        parts = {"positions": sel.positions, **{f"attr_{k}": v for k, v in sel.attributes.items()}}
        if "object_ids" in self.files:
            parts["object_ids"] = sel.object_ids
        for k, fh in self.files.items():
            fh.write(np.ascontiguousarray(parts[k], dtype=self.meta[k][0]).data)
        self.rows += len(sel)

    def close(self) -> None:
        try:
            with zipfile.ZipFile(self.path, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
                for k, fh in self.files.items():
                    dtype, row_shape = self.meta[k]
                    fh.flush()
                    fh.seek(0)
                    with zf.open(f"{k}.npy", "w", force_zip64=True) as dst:
                        np.lib.format.write_array_header_2_0(
                            dst, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                                  "shape": (self.rows, *row_shape)})
                        while block := fh.read(8 << 20):
                            dst.write(block)
        finally:
            for fh in self.files.values():
                fh.close()
            self.tmp.cleanup()


class ParquetOut:
    """Parquet (pyarrow), the CSV's flat columns; batches are gathered into row groups of
    ``ROW_GROUP`` rows (small row groups make slow Parquet), so memory is one row group."""

    ROW_GROUP = 1 << 17

    def __init__(self, path: str, template: Selection):
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.pa = pa
        table = self._table(template)
        self.writer = pq.ParquetWriter(path, table.schema)
        self.pending: list = []
        self.rows = 0

    def _table(self, sel: Selection):
        return self.pa.table({n: self.pa.array(np.ascontiguousarray(c)) for n, c in columns(sel)})

    def write(self, sel: Selection) -> None:
        if len(sel):
            self.pending.append(self._table(sel))
            self.rows += len(sel)
            if self.rows >= self.ROW_GROUP:
                self._flush()

    def _flush(self) -> None:
        if self.pending:
            self.writer.write_table(self.pa.concat_tables(self.pending))
            self.pending, self.rows = [], 0

    def close(self) -> None:
        try:
            self._flush()
        finally:
            self.writer.close()


WRITERS = {"csv": CsvOut, "npz": NpzOut, "parquet": ParquetOut}


async def export(ds, out: str, *, level: int = 0, fmt: str | None = None, attributes=None, prefetch: int = 4,
                 batch_chunks: int = 16, progress: Callable[[dict], None] | None = None) -> dict:
    """Write every vertex of a level to ``out`` (npz, csv or parquet), batch by batch.

    ``progress(summary)`` is called after each batch.  File writes run in a
    worker thread so the next batches keep downloading meanwhile.  Returns
    vertices, chunks, requests, bytes, seconds and MB/s (bytes fetched).
    """
    fmt = format_of(out, fmt)
    t0 = time.perf_counter()
    before = ds.stats.snapshot()
    lvl = await ds.level(level)
    names = pick_attributes(lvl, attributes)
    template = await read_chunks(ds, lvl, lvl.nonempty_chunks[:0], names)  # dtypes and shapes, no data
    total_chunks = int(len(lvl.nonempty_chunks))
    writer = await anyio.to_thread.run_sync(WRITERS[fmt], str(out), template)
    summary = {"vertices": 0, "chunks": 0, "total_chunks": total_chunks, "requests": 0, "bytes": 0,
               "seconds": 0.0, "mb_per_s": 0.0, "format": fmt, "out": str(out)}

    def update() -> None:
        now = ds.stats.snapshot()
        summary["requests"] = now["requests"] - before["requests"]
        summary["bytes"] = now["bytes"] - before["bytes"]
        summary["seconds"] = time.perf_counter() - t0
        summary["mb_per_s"] = summary["bytes"] / 1e6 / max(summary["seconds"], 1e-9)

    try:
        try:
            async with iter_chunks(ds, level=level, attributes=names, prefetch=prefetch,
                                   batch_chunks=batch_chunks) as batches:
                async for sel in batches:
                    await anyio.to_thread.run_sync(writer.write, sel)
                    summary["vertices"] += len(sel)
                    summary["chunks"] = min(total_chunks, summary["chunks"] + batch_chunks)
                    update()
                    if progress is not None:
                        progress(summary)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(writer.close)
    except BaseException:
        with contextlib.suppress(OSError):  # no half-written file that looks like a result
            os.remove(str(out))
        raise
    update()
    return summary


class ProgressBar:
    """A one-line text bar on a stream (stderr), redrawn at most ``hz`` times a second."""

    def __init__(self, stream, width: int = 30, hz: float = 10.0):
        self.stream = stream
        self.width = width
        self.every = 1.0 / hz
        self.last = 0.0
        self.drawn = False

    def __call__(self, s: dict) -> None:
        now = time.perf_counter()
        if now - self.last < self.every and s["chunks"] < s["total_chunks"]:
            return
        self.last = now
        frac = s["chunks"] / s["total_chunks"] if s["total_chunks"] else 1.0
        fill = int(round(frac * self.width))
        self.stream.write(f"\r[{'#' * fill}{'.' * (self.width - fill)}] {frac * 100:5.1f}% "
                          f"{s['chunks']}/{s['total_chunks']} chunks {s['vertices']:,} vertices "
                          f"{s['mb_per_s']:.1f} MB/s")
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
