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

The job state (:class:`~zvf.write.jobs.WriteJob`, ``start``, ``discard``), the spill objects, the
chunk groups and the summaries are :mod:`zvf.write.jobs`', shared with the object tasks.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import numpy as np

from ...config import tuning
from ...errors import FormatError, InvalidArgumentError
from ...format import builders
from ...format.fragments import FragmentIndex
from ...format.grid import row_positions
from .. import inputs
from ..jobs import (
    GridPlan,
    WriteJob,
    add_source,
    cell_writer,
    chunk_groups,
    commit_writer,
    discard,
    extent,
    pack_summary,
    read_spilled,
    upload_spill,
)
from ..level import LevelWriter, put_rows
from ..object_index import check_layout
from ..partition import partition
from ..store_writer import empty_group
from ..types import WriteSummary
from .level import PointExtras, manifest_rows, publish_level
from .stream import Spill

if TYPE_CHECKING:

    from ..types import Columns, Groups, PointBatch


# ----------------------------------------------------------------------------- 1. route


def route_source(job: WriteJob, index: int, batches: Iterable[PointBatch], *,
                 spill_bytes: int | None = None) -> dict[str, Any]:
    """Spill one source's rows, sorted by chunk, to ``<job>/spill/<index>.bin``; returns its summary
    (``spill_bytes``: default, this process's ``spill_bytes`` setting)."""
    spill_bytes = tuning().spill_bytes if spill_bytes is None else spill_bytes
    return anyio.run(_route, job, index, batches, spill_bytes, backend="asyncio")


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


# ----------------------------------------------------------------------------- plan


@dataclass
class CellPlan(GridPlan):
    """A point write's plan: with ids or not, and where each source's rows start."""

    with_ids: bool
    explicit_ids: bool
    row_offsets: np.ndarray  # (S,) first global row of each source
    uniq: np.ndarray | None


def plan_cells(job: WriteJob, summaries: list[dict[str, Any]], *, rows_per_task: int | None = None) -> CellPlan:
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
    groups = chunk_groups(chunks, rows, origin, job.codec().shard,
                          tuning().rows_per_task if rows_per_task is None else rows_per_task)
    uniq = None
    if explicit:
        uniq = np.unique(np.concatenate([s["ids"] for s in summaries if "ids" in s] or [np.zeros(0, np.int64)]))
    elif with_ids:
        uniq = np.arange(n, dtype=np.int64)
    return CellPlan(n, dtype, {k: (np.dtype(d), tuple(r)) for k, (d, r) in first["attributes"].items()}, lo, hi,
                    origin, grid_shape, chunks, groups, at, with_ids=with_ids, explicit_ids=explicit,
                    row_offsets=np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64), uniq=uniq)


# ----------------------------------------------------------------------------- 2. cells


def write_cells(job: WriteJob, index: int, plan: CellPlan, sources: list[dict[str, Any]]) -> dict[str, Any]:
    """Write the cells of ``plan.groups[index]`` from every source's spill; returns its summary."""
    return anyio.run(_write_cells, job, index, plan, sources, backend="asyncio")


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

    async with cell_writer(ex) as writer:
        level = LevelWriter(writer, 0, plan.origin, plan.grid_shape, job.codec())
        await put_rows(level, part, pos, attrs, fragments_of)
        await level.finish()  # flushes this group's whole shards; the documents come at commit
    summary: dict[str, Any] = {"cells": writer.cells_written, "bytes": writer.bytes_written}
    if oids is not None:
        summary["frag_chunk"] = plan.groups[index][part.frag_chunk]
        summary["frag_keys"] = np.asarray(part.frag_keys, np.int64)
    await ex.put(f"{job.prefix}cells/{index:06d}.npz", pack_summary(summary))
    return summary


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
    async with commit_writer(ex, overwrite=overwrite, consolidate=object_index_layout != "reference") as writer:
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
