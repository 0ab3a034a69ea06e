"""A point write split into tasks an engine can map over many processes or machines.

``write_points`` of one big input, cut into *sources* (files, array blocks,
bag partitions), becomes three kinds of task; any engine (``zvf.dask``) runs
them, each with only a :class:`WriteJob` (store URL + storage options, never
a live store object) and small arguments:

1. :func:`route_source` -- one per source: checks and casts its batches with
   the streaming writer's :class:`~zvf.write.points.stream.Spill`, sorts its rows by
   chunk (input order kept within a chunk) and uploads them as one *spill*
   object under the job prefix, plus a small summary (row count, extent,
   dtype, schema, distinct ids, rows per chunk).
2. :func:`write_cells` -- one per group of chunks (whole shards when
   sharded): reads its chunks' rows from every spill, in source order, and
   writes the chunks' cells with the serial writer's ``partition`` and
   ``put_rows``.  Returns each chunk's fragments' object ids.
3. :func:`commit` -- one, on the driver: array documents, object index,
   per-object/group data, level, root last (``publish_level``), then the job
   prefix is removed.

Rows reach ``partition`` in the order the concatenated input has them, so
the store is byte for byte the one ``write_points`` writes from the
concatenation.  Every key a task writes is a function of the job and the
task's index, and its bytes of the input: a retried task (its worker died)
rewrites the same objects with the same bytes.  A task's summary is stored
under the job prefix after its data, so a resumed job skips what is done.

The job state (:class:`WriteJob`, :func:`start`, :func:`discard`), spills
(:func:`upload_spill`, :func:`read_spilled`, :func:`source_slices`), chunk
groups and summaries serve the object tasks of :mod:`.object_tasks` too.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio
import numpy as np

from ...errors import FormatError, InvalidArgumentError, StoreExistsError
from ...format import builders
from ...format.codecs import CellCodec
from ...format.fragments import FragmentIndex
from ...format.grid import row_positions
from ...format.layout import LevelLayout
from ...format.metadata import CLAIM_KEY
from ...format.shard import shard_coords
from ...io.executor import Executor
from ...io.plan import ByteRange
from ...io.store import open_store
from .. import inputs
from ..engine import StoreWriter, empty_group
from ..level import LevelWriter, ShardShape, put_rows, shard_tuple
from ..object_index import check_layout
from ..partition import partition
from ..types import WriteSummary
from .level import PointExtras, manifest_rows, publish_level
from .stream import RunSpill, Spill

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike

    from ...io.options import StorageOptions
    from ..types import Bounds, Columns, Groups, PointBatch, Shape

BatchT = TypeVar("BatchT")
BatchT_contra = TypeVar("BatchT_contra", contravariant=True)

JOBS_PREFIX = ".zvf-jobs/"
ROWS_PER_TASK = 4_000_000  # rows a write_cells task gathers at once (bounds a worker's memory)


@dataclass(frozen=True)
class WriteJob:
    """Everything a task needs, picklable: where the store is and how it is laid out."""

    url: str
    storage_options: dict[str, Any] | None
    job: str
    chunk_shape: tuple[float, ...]
    bin_shape: tuple[float, ...] | None
    bounds: tuple[tuple[float, ...], tuple[float, ...]] | None
    dtype: str | None
    compression: str | None
    shard_shape: tuple[int, ...] | None
    implicit_ids: bool  # groups without object ids: every row is an object, numbered in input order
    geometry: str = "point_cloud"

    @property
    def prefix(self) -> str:
        return f"{JOBS_PREFIX}{self.job}/"

    def layout(self, *, with_ids: bool) -> LevelLayout:
        """Level 0's layout, under the placement rule of rows with (or without) object ids."""
        return LevelLayout.for_writing(list(self.chunk_shape), None if self.bin_shape is None else list(self.bin_shape),
                                       with_ids=with_ids)

    def codec(self) -> CellCodec:
        return CellCodec.for_writing(self.compression, shard_tuple(self.shard_shape, len(self.chunk_shape)))

    def executor(self) -> Executor:
        return Executor(open_store(self.url, mode="w", storage_options=self.storage_options))

    def params(self) -> dict[str, Any]:
        """What a resumed job must agree on (JSON)."""
        return {k: v for k, v in asdict(self).items() if k not in ("storage_options",)}


def new_job(url: str, storage_options: StorageOptions | Mapping[str, Any] | None, *, job: str | None,
            chunk_shape: Shape, bin_shape: Shape | None, bounds: Bounds | None, dtype: DTypeLike | None,
            compression: str | None, shard_shape: ShardShape, implicit_ids: bool = False,
            geometry: str = "point_cloud") -> WriteJob:
    """Check the layout arguments once, on the driver (the same checks ``write_points`` makes)."""
    if isinstance(chunk_shape, str):
        raise InvalidArgumentError("chunk_shape: a distributed write needs numbers per axis ('auto' looks at "
                                   "all the data first)")
    ndim = LevelLayout.for_writing(chunk_shape, bin_shape, with_ids=False).ndim
    shard = shard_tuple(shard_shape, ndim)
    CellCodec.for_writing(compression, shard)
    box = None
    if bounds is not None:
        lo, hi = inputs.bounds_for(np.zeros((0, ndim)), bounds, ndim)
        box = (tuple(lo), tuple(hi))
    dtype_str = None if dtype is None else np.dtype(dtype).str
    if job is not None and (not isinstance(job, str) or not job or "/" in job):
        raise InvalidArgumentError(f"job must be a non-empty name without '/', got {job!r}")

    def plain(v: ArrayLike) -> tuple[float, ...]:  # as the caller gave it (0.9.2 records ints as ints)
        return tuple(x.item() if hasattr(x, "item") else x for x in np.ravel(v).tolist())

    return WriteJob(url, None if storage_options is None else dict(storage_options), job or uuid.uuid4().hex,
                    plain(chunk_shape), None if bin_shape is None else plain(bin_shape), box, dtype_str, compression,
                    shard, implicit_ids, geometry)


# ----------------------------------------------------------------------------- small blobs


def pack_summary(summary: Mapping[str, Any]) -> bytes:
    """A task summary as one .npz: arrays as themselves, the rest as JSON (never pickled)."""
    arrays = {k: v for k, v in summary.items() if isinstance(v, np.ndarray)}
    meta = {k: v for k, v in summary.items() if not isinstance(v, np.ndarray)}
    buf = io.BytesIO()
    # mypy matches the ``**arrays`` names against savez's ``allow_pickle``: they are summary keys, never that one
    np.savez(buf, __meta__=np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def unpack_summary(blob: bytes, key: str) -> dict[str, Any]:
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as z:
            out: dict[str, Any] = json.loads(bytes(z["__meta__"]).decode())
            out.update((k, z[k]) for k in z.files if k != "__meta__")
    except (ValueError, KeyError, OSError) as exc:
        raise FormatError(f"{key}: not a zvf job summary ({exc})") from None
    return out


async def load_summaries(ex: Executor, prefix: str) -> dict[int, dict[str, Any]]:
    """Summaries stored under ``prefix`` (``NNNNNN.npz``), by task index."""
    keys = [k for k, _ in await ex.list(prefix) if k.endswith(".npz")]
    blobs = await ex.gather([ex.get(k) for k in keys])
    return {int(k.rsplit("/", 1)[1][:-4]): unpack_summary(b, k) for k, b in zip(keys, blobs) if b is not None}


# ----------------------------------------------------------------------------- 1. route


def route_source(job: WriteJob, index: int, batches: Iterable[PointBatch], *,
                 spill_bytes: int = 64 << 20) -> dict[str, Any]:
    """Spill one source's rows, sorted by chunk, to ``<job>/spill/<index>.bin``; returns its summary."""
    return anyio.run(_route, job, index, batches, spill_bytes, backend="asyncio")


class BatchSink(Protocol[BatchT_contra]):
    """A routing task's spill: takes one batch at a time (InvalidArgumentError for a bad one)."""

    def add(self, batch: BatchT_contra) -> None: ...


def add_source(spill: BatchSink[BatchT], batches: Iterable[BatchT], index: int) -> None:

    """Feed one source's batches to a routing task's spill; its errors name the source."""
    try:
        for batch in batches:
            spill.add(batch)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"sources[{index}]: {exc}") from None


async def _route(job: WriteJob, index: int, batches: Iterable[PointBatch], spill_bytes: int) -> dict[str, Any]:
    ex = job.executor()
    with tempfile.TemporaryDirectory(prefix="zvf-route-") as tmp:
        spill = Spill(tmp, job.layout(with_ids=False), None if job.dtype is None else np.dtype(job.dtype), job.bounds,
                      implicit_ids=job.implicit_ids, spill_bytes=spill_bytes)
        try:
            add_source(spill, batches, index)
            spill.finish()
            layout, chunks, counts = await upload_spill(ex, f"{job.prefix}spill/{index:06d}.bin", spill.rows,
                                                        spill.chunk_coords)
            summary: dict[str, Any] = {
                "n": int(spill.n_rows), "dtype": None if spill.dtype is None else np.dtype(spill.dtype).str,
                "attributes": {k: [np.dtype(d).str, list(r)] for k, (d, r) in (spill.attr_schema or {}).items()},
                "explicit_ids": spill.explicit_ids, "columns": layout, "chunks": chunks, "counts": counts,
                "lo": np.asarray([] if spill.lo is None else spill.lo, np.float64),
                "hi": np.asarray([] if spill.hi is None else spill.hi, np.float64),
            }
            if spill.explicit_ids:
                summary["ids"] = spill.object_ids()
        finally:
            spill.close()
    await ex.put(f"{job.prefix}map/{index:06d}.npz", pack_summary(summary))
    return summary


async def upload_spill(ex: Executor, key: str, rows: RunSpill, coords: np.ndarray,
                       convert: Callable[[str, np.ndarray], np.ndarray] | None = None
                       ) -> tuple[list[list[Any]], np.ndarray, np.ndarray]:
    """Upload every row of a finished ``rows`` spill as one object at ``key``: chunks in C order, input order
    within a chunk, each column a contiguous block.  ``coords``: chunk coords by id; ``convert(name, col)``
    rewrites a column on the way (e.g. chunk ids, local to this spill, to coordinates).  Returns the column
    layout (name, dtype, row shape, byte offset) and the (C order) chunks with their row counts."""
    order = np.lexsort(coords.T[::-1]) if len(coords) else np.zeros(0, np.int64)  # C order of chunks
    parts: dict[str, list[np.ndarray]] = {}
    counts = np.zeros(len(order), np.int64)
    for i, gid in enumerate(order.tolist()):
        cols = rows.read(gid)
        counts[i] = len(next(iter(cols.values()))) if cols else 0
        for name, col in cols.items():
            parts.setdefault(name, []).append(col if convert is None else convert(name, col))
    layout, blobs, offset = [], [], 0
    for name, (dtype, row_shape) in (rows.schema or {}).items():
        if name in parts:
            col = np.concatenate(parts.pop(name))
        else:
            col = np.zeros((0, *row_shape), dtype)
            if convert is not None:
                col = convert(name, col)
        data = np.ascontiguousarray(col).tobytes()
        layout.append([name, col.dtype.str, list(col.shape[1:]), offset])
        blobs.append(data)
        offset += len(data)
    await ex.put(key, b"".join(blobs))
    return layout, coords[order].astype(np.int64).reshape(-1, coords.shape[1]), counts


# ----------------------------------------------------------------------------- plan


@dataclass
class GridPlan:
    """What routed sources add up to and how their chunks are cut into cell tasks: the part of a
    plan every distributed writer (points here, objects in ``object_tasks``) shares."""

    n: int
    dtype: np.dtype
    attributes: dict[str, tuple[np.dtype, tuple[int, ...]]]
    lo: list[float]
    hi: list[float]
    origin: tuple[int, ...]
    grid_shape: tuple[int, ...]
    chunks: np.ndarray  # (C, ndim) every chunk, C order
    groups: list[np.ndarray]  # rows of ``chunks``, one array per cell task
    source_chunks: list[np.ndarray]  # per source: row in ``chunks`` of each chunk of its spill


@dataclass
class CellPlan(GridPlan):
    """A point write's plan: with ids or not, and where each source's rows start."""

    with_ids: bool
    explicit_ids: bool
    row_offsets: np.ndarray  # (S,) first global row of each source
    uniq: np.ndarray | None


def plan_cells(job: WriteJob, summaries: list[dict[str, Any]], *, rows_per_task: int = ROWS_PER_TASK) -> CellPlan:
    """Check the sources agree (dtype, attributes, ids) and cut the chunks into task groups."""
    ndim = len(job.chunk_shape)
    full = [s for s in summaries if s["n"]] or summaries[:1]
    dtypes = sorted({s["dtype"] for s in full if s["dtype"] is not None})
    if len(dtypes) > 1:
        raise InvalidArgumentError(f"sources give positions of dtypes {dtypes}; pass dtype= to store one")
    for i, s in enumerate(summaries):
        if s["n"] and s["attributes"] != full[0]["attributes"]:
            raise InvalidArgumentError(f"sources[{i}] has attributes {s['attributes']}, sources[0] "
                                       f"{full[0]['attributes']}: every source must carry the same ones")
        if s["n"] and s["explicit_ids"] != full[0]["explicit_ids"]:
            raise InvalidArgumentError(f"sources[{i}]: either every source has 'object_ids' or none does")
    first: dict[str, Any] = full[0] if full else {"attributes": {}, "explicit_ids": False}
    explicit = bool(first["explicit_ids"])
    with_ids = explicit or job.implicit_ids
    counts = np.asarray([s["n"] for s in summaries], np.int64)
    n = int(counts.sum())
    dtype = np.dtype(dtypes[0]) if dtypes else inputs.position_dtype(np.dtype(np.float32), job.dtype)
    lo, hi = extent(job, summaries)
    origin, grid_shape = job.layout(with_ids=with_ids).extent(lo, hi)
    every = [s["chunks"].reshape(-1, ndim) for s in summaries]
    chunks = np.unique(np.concatenate(every), axis=0) if n else np.zeros((0, ndim), np.int64)  # C order
    at = [row_positions(chunks, c) if len(c) else np.zeros(0, np.int64) for c in every]  # source chunk -> chunks row
    rows = np.zeros(len(chunks), np.int64)
    for s, idx in zip(summaries, at):
        rows[idx] += s["counts"]
    groups = chunk_groups(chunks, rows, origin, job.codec().shard, rows_per_task)
    uniq = None
    if explicit:
        uniq = np.unique(np.concatenate([s["ids"] for s in summaries if "ids" in s] or [np.zeros(0, np.int64)]))
    elif with_ids:
        uniq = np.arange(n, dtype=np.int64)
    return CellPlan(n, dtype, {k: (np.dtype(d), tuple(r)) for k, (d, r) in first["attributes"].items()}, lo, hi,
                    origin, grid_shape, chunks, groups, at, with_ids=with_ids, explicit_ids=explicit,
                    row_offsets=np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64), uniq=uniq)


def extent(job: WriteJob, summaries: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    """The store's bounds: the job's, else the union of the sources' extents."""
    if job.bounds is not None:
        lo, hi = (list(c) for c in job.bounds)
        return lo, hi
    full = [s for s in summaries if s["n"]]
    if not full:
        raise InvalidArgumentError("bounds are required when there are no positions")
    return (np.min([s["lo"] for s in full], axis=0).astype(np.float64).tolist(),
            np.max([s["hi"] for s in full], axis=0).astype(np.float64).tolist())


def chunk_groups(chunks: np.ndarray, rows: np.ndarray, origin: Sequence[int], shard: tuple[int, ...] | None,
                 rows_per_task: int) -> list[np.ndarray]:
    """Chunks cut into runs of about ``rows_per_task`` rows; a shard never spans two groups."""
    if not len(chunks):
        return []
    if shard is None:
        unit = np.arange(len(chunks))
        order = unit
    else:
        sc = shard_coords(chunks - np.asarray(origin), shard).reshape(len(chunks), -1)
        order = np.lexsort((np.arange(len(chunks)), *sc.T[::-1]))
        sorted_sc = sc[order]
        unit = np.concatenate(([0], np.cumsum(np.any(sorted_sc[1:] != sorted_sc[:-1], axis=1))))
    unit_rows = np.bincount(unit, weights=rows[order]).astype(np.int64)
    group_of_unit = np.zeros(len(unit_rows), np.int64)
    acc, g = 0, 0
    for u, r in enumerate(unit_rows.tolist()):  # one step per shard/chunk, not per row
        if acc and acc + r > rows_per_task:
            g, acc = g + 1, 0
        group_of_unit[u] = g
        acc += r
    gid = group_of_unit[unit]
    cut = np.flatnonzero(gid[1:] != gid[:-1]) + 1
    return [np.sort(part) for part in np.split(order, cut)]


# ----------------------------------------------------------------------------- 2. cells


class CellWriter(StoreWriter):
    """Uploads cells only: the driver claimed the store and publishes its documents at commit."""

    async def _claim(self) -> None:
        pass

    async def _publish(self) -> None:
        pass


def write_cells(job: WriteJob, index: int, plan: CellPlan, sources: list[dict[str, Any]]) -> dict[str, Any]:
    """Write the cells of ``plan.groups[index]`` from every source's spill; returns its summary."""
    return anyio.run(_write_cells, job, index, plan, sources, backend="asyncio")


def source_slices(group: np.ndarray, source_chunks: list[np.ndarray], sources: list[dict[str, Any]], *,
                  counts: str = "counts", columns: str = "columns") -> list[dict[str, Any]]:
    """Only what a task writing ``group`` (sorted rows of the plan's chunks) needs of each source summary
    (small task arguments): ``source_chunks[i]`` locates source ``i``'s spilled chunks in the plan's,
    ``sources[i][counts]`` their row counts and ``sources[i][columns]`` the spill's column layout."""
    out = []
    for s, idx in zip(sources, source_chunks):
        starts = np.concatenate(([0], np.cumsum(s[counts])[:-1])).astype(np.int64)
        k = np.minimum(np.searchsorted(group, idx), max(len(group) - 1, 0))
        hit = np.flatnonzero(group[k] == idx) if len(group) else np.zeros(0, np.int64)
        out.append({"chunk": k[hit], "row": starts[hit], "count": s[counts][hit], "columns": s[columns]})
    return out


async def _write_cells(job: WriteJob, index: int, plan: CellPlan, sources: list[dict[str, Any]]) -> dict[str, Any]:
    level_layout = job.layout(with_ids=plan.with_ids)
    ex = job.executor()
    want = plan.chunks[plan.groups[index]]
    schema: dict[str, tuple[np.dtype, tuple[int, ...]]] = {"positions": (plan.dtype, (level_layout.ndim,))}
    schema.update((f"attr:{k}", v) for k, v in plan.attributes.items())
    if plan.with_ids:
        schema["object_ids"] = (np.dtype(np.int64), ())
    pieces = await read_spilled(ex, f"{job.prefix}spill/", sources)
    if not plan.explicit_ids and "object_ids" in pieces:  # row numbers of the source -> of the whole input
        pieces["object_ids"] = [(k, si, arr + plan.row_offsets[si]) for k, si, arr in pieces["object_ids"]]
    cols = {}
    for name, (dtype, row_shape) in schema.items():  # chunk by chunk, sources in input order
        got = [arr for _, _, arr in pieces.get(name, [])]
        cols[name] = np.concatenate(got).astype(dtype, copy=False) if got else np.zeros((0, *row_shape), dtype)
    del pieces
    pos = cols.pop("positions")
    oids = cols.pop("object_ids", None)
    attrs = {name[5:]: v for name, v in cols.items()}
    if oids is None:
        chunks, bins = level_layout.bin_of(pos)
        part = partition(chunks, bins, all_keys=level_layout.bins_in_chunk)
    else:
        part = partition(level_layout.chunk_of(pos), oids)
    if len(part.chunks) != len(want) or np.any(part.chunks != want):
        raise FormatError(f"{job.prefix}: the spilled rows of task {index} do not fall in its chunks")

    def fragments_of(k: int) -> FragmentIndex:
        s = part.chunk_fragments(k)
        return FragmentIndex.from_ranges(part.frag_starts[s], part.frag_counts[s])

    async with CellWriter(ex) as writer:
        level = LevelWriter(writer, 0, plan.origin, plan.grid_shape, job.codec())
        await put_rows(level, part, pos, attrs, fragments_of)
        await level.finish()  # flushes this group's whole shards; the documents come at commit
    summary: dict[str, Any] = {"cells": writer.cells_written, "bytes": writer.bytes_written}
    if oids is not None:
        summary["frag_chunk"] = plan.groups[index][part.frag_chunk]
        summary["frag_keys"] = np.asarray(part.frag_keys, np.int64)
    await ex.put(f"{job.prefix}cells/{index:06d}.npz", pack_summary(summary))
    return summary


async def read_spilled(ex: Executor, folder: str, sources: list[dict[str, Any]]
                       ) -> dict[str, list[tuple[int, int, np.ndarray]]]:
    """The rows of a task's chunks from every source's spill ``<folder><source>.bin`` (one coalesced read).

    ``sources``: :func:`source_slices` of the task.  Returns, per column,
    ``(chunk in group, source, rows)`` sorted chunk by chunk, sources in input
    order -- the order the concatenated input has them.
    """
    ranges, where = [], []
    for si, s in enumerate(sources):
        if not len(s["count"]) or not int(s["count"].sum()):
            continue
        for name, d, r, off in s["columns"]:
            dtype, row_shape = np.dtype(d), tuple(r)
            rb = dtype.itemsize * int(np.prod(row_shape, dtype=np.int64))
            for k, row, c in zip(s["chunk"].tolist(), s["row"].tolist(), s["count"].tolist()):
                ranges.append(ByteRange(f"{folder}{si:06d}.bin", off + row * rb, off + (row + c) * rb))
                where.append((k, si, name, dtype, row_shape, c, rb))
    payloads = await ex.read_ranges(ranges)
    pieces: dict[str, list[tuple[int, int, np.ndarray]]] = {}
    for (k, si, name, dtype, row_shape, c, rb), blob in zip(where, payloads):
        if blob is None or len(blob) != c * rb:
            raise FormatError(f"{folder}{si:06d}.bin: missing or shorter than its summary says")
        pieces.setdefault(name, []).append((k, si, np.frombuffer(blob, dtype).reshape(c, *row_shape)))
    for got in pieces.values():
        got.sort(key=lambda p: (p[0], p[1]))
    return pieces


# ----------------------------------------------------------------------------- job state


async def start(job: WriteJob, *, overwrite: bool, n_sources: int
                ) -> tuple[dict[int, dict[str, Any]], dict[int, dict[str, Any]]]:
    """Claim the store (or resume the job that claimed it); returns the finished (route, cells) summaries."""
    ex = job.executor()
    manifest_key = f"{job.prefix}job.json"
    saved = await ex.get(manifest_key)
    if saved is not None:
        state = json.loads(saved)
        params = json.loads(json.dumps({**job.params(), "sources": n_sources}))
        if state.get("params") != params:
            raise InvalidArgumentError(f"{ex.handle.url}: job {job.job!r} was started with other arguments "
                                       f"({state.get('params')}); start a new job or pass the same ones")
        if await ex.get(CLAIM_KEY) != state["claim"].encode():
            raise StoreExistsError(f"{ex.handle.url}: job {job.job!r} no longer holds the store's claim")
        return await load_summaries(ex, f"{job.prefix}map/"), await load_summaries(ex, f"{job.prefix}cells/")
    claimer = StoreWriter(ex, overwrite=overwrite, lease=None)  # held across processes: never presumed dead
    await claimer._claim()  # the serial writers' claim: one writer per new store
    if claimer.publication is not None:  # workers write cells in the default key family: not over a store
        assert claimer.lock is not None  # _claim took it before it began a publication
        await claimer.lock.release()
        raise StoreExistsError(f"{ex.handle.url}: a distributed write makes a new store; to replace the store "
                               "there, write it elsewhere (or with the in-process writer, which keeps it readable "
                               "until the new one is published)")
    claim = (await ex.get(CLAIM_KEY) or b"").decode()
    state = {"params": {**job.params(), "sources": n_sources}, "claim": claim}
    await ex.put(manifest_key, json.dumps(state).encode())
    return {}, {}


class CommitWriter(StoreWriter):
    """Publishes documents and the root over cells already uploaded (the claim is the job's)."""

    async def _claim(self) -> None:
        pass


async def commit(job: WriteJob, plan: CellPlan, cells: list[dict[str, Any]], *, overwrite: bool,
                 object_attributes: Columns | None = None, groups: Groups | None = None,
                 group_attributes: Columns | None = None, object_index_layout: str = "sharded") -> WriteSummary:
    """Array documents, object index, per-object/group data, level and root; then remove the job prefix."""
    check_layout(object_index_layout)
    level_layout = job.layout(with_ids=plan.with_ids)
    ex = job.executor()
    for name in plan.attributes:
        inputs.check_name(name, "attribute")
    extras = PointExtras.check(plan.uniq, object_attributes, groups, group_attributes,
                               plan.uniq if plan.explicit_ids else None)
    async with CommitWriter(ex, overwrite=overwrite, consolidate=object_index_layout != "reference") as writer:
        level = LevelWriter(writer, 0, plan.origin, plan.grid_shape, job.codec())
        if plan.attributes:
            empty_group(writer, "0/vertex_attributes")
        if len(plan.chunks):  # documents in the order put_rows declares its arrays
            level.array("vertices", builders.vertices_attributes(plan.dtype))
            level.array("vertex_fragments", builders.vertex_fragments_attributes())
            for name, (dt, rs) in plan.attributes.items():
                level.array(f"vertex_attributes/{name}", builders.vertex_attribute_attributes(name, dt, rs))
            for arr in level.arrays.values():
                arr.nonempty = [tuple(c) for c in plan.chunks.tolist()]
        else:  # no rows: declare the arrays anyway, as write_points does
            await put_rows(level, partition(np.zeros((0, level_layout.ndim), np.int64), np.zeros(0, np.int64)),
                           np.zeros((0, level_layout.ndim), plan.dtype),
                           {k: np.zeros((0, *rs), dt) for k, (dt, rs) in plan.attributes.items()}, None)
        await level.finish()
        manifest = None
        if plan.uniq is not None:
            fr = np.concatenate([c["frag_chunk"] for c in cells] or [np.zeros(0, np.int64)])
            fk = np.concatenate([c["frag_keys"] for c in cells] or [np.zeros(0, np.int64)])
            by_chunk = np.argsort(fr, kind="stable")  # fragments grouped by chunk, as in one Partition
            manifest = manifest_rows(fr[by_chunk], fk[by_chunk], plan.chunks, plan.uniq)
        await publish_level(writer, ex.handle.url, ndim=level_layout.ndim,
                            shapes=(list(job.chunk_shape), _shape(job.bin_shape)),
                            bounds=(plan.lo, plan.hi), n=plan.n, has_attributes=bool(plan.attributes), uniq=plan.uniq,
                            manifest=manifest, extras=extras, compression=job.compression,
                            object_index_layout=object_index_layout)
    await discard(job)
    return WriteSummary(
        url=ex.handle.url, geometry="point_cloud", vertex_count=plan.n, object_count=0 if plan.uniq is None else
        len(plan.uniq), chunk_count=len(plan.chunks), group_count=len(extras.group_rows),
        cells_written=writer.cells_written + sum(c["cells"] for c in cells),
        bytes_written=writer.bytes_written + sum(c["bytes"] for c in cells), requests=ex.stats.snapshot(),
        bins_per_chunk=list(level_layout.bins_per_chunk))


def _shape(v: tuple[float, ...] | None) -> list[float] | None:
    return None if v is None else list(v)


async def discard(job: WriteJob) -> None:
    """Remove the job's spills and summaries (after its commit, or to abandon it)."""
    ex = job.executor()
    keys = [k for k, _ in await ex.list(job.prefix)]
    if keys:
        await ex.delete(keys)


def batches_of_source(source: Any, index: int) -> Iterable[Any]:
    """The batches of one source: a ``.npy``/``.npz`` path, a callable, an array, a batch dict or a list.

    ``.npz`` keys are the export's: ``positions``, ``object_ids``, ``attr_<name>``.
    """
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        ext = os.path.splitext(path)[1].lower()
        if ext == ".npy":
            return [np.load(path, allow_pickle=False)]
        if ext == ".npz":
            with np.load(path, allow_pickle=False) as z:
                if "positions" not in z.files:
                    raise InvalidArgumentError(f"sources[{index}] {path!r} has no 'positions' array")
                other = [k for k in z.files if k not in ("positions", "object_ids") and not k.startswith("attr_")]
                if other:  # never dropped unseen: a source's rows are all it holds
                    raise InvalidArgumentError(f"sources[{index}] {path!r}: keys {other} are not a point source's "
                                               f"(positions, object_ids, attr_<name>)")
                batch: dict[str, Any] = {"positions": z["positions"]}
                if "object_ids" in z.files:
                    batch["object_ids"] = z["object_ids"]
                attrs = {k[5:]: z[k] for k in z.files if k.startswith("attr_")}
                if attrs:
                    batch["attributes"] = attrs
            return [batch]
        raise InvalidArgumentError(f"sources[{index}] {path!r}: a file source must be .npy or .npz")
    if callable(source):
        return batches_of_source(source(), index)
    if isinstance(source, (np.ndarray, dict)):
        return [source]
    if isinstance(source, (list, tuple)):
        return source
    raise InvalidArgumentError(f"sources[{index}] must be a .npy/.npz path, a callable, an array or a list of "
                               f"batches, got {type(source).__name__}")
