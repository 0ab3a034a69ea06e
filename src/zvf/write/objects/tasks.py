"""An object write split into tasks an engine maps over many workers.

The same plan -> map -> commit as the point tasks of :mod:`zvf.write.points.tasks`, over the
chunk-local steps of :mod:`.cells`:

1. :func:`route_objects` -- one per source: the streaming writer's first pass
   (``_PathSpill`` / ``_ConnectedSpill``: checks, casts, placement) over the
   source's batches.  Its vertex rows are uploaded as one spill object sorted
   by chunk (graphs, skeletons, meshes: their link records too, filed by the
   chunk of their link cell); its summary keeps what needs every object --
   paths: the runs (chunk and length of each, runs per object) and per-batch
   object attributes; graphs: distinct ids, skeleton roots, record width --
   and the extent and schemas.
2. :func:`object_cells` -- one per group of chunks (whole shards when
   sharded): reads its chunks' rows from every spill, in source order, and
   writes their vertex cells, fragment indexes and fragment attributes; for
   paths also the bridge links filed under them (their runs come with the
   task), for graphs a vertex -> chunk-local row table per chunk.
3. :func:`link_cells` (graphs, skeletons, meshes) -- one per group: its link
   cells, each endpoint's row looked up in the tables of the chunks its
   records reach.
4. :func:`commit_objects` -- one, on the driver: the array documents (chunk
   lists from the task summaries), the fragment-index shards when zvf's
   layout shards them alone (their cells come in the summaries, a few bytes
   per fragment), the object index, the per-object and group tables, the
   level and the root.

The driver holds a few integers per fragment, as the streaming writer does,
never a vertex.  Object ids continue across sources as across batches, and
every chunk sees its rows in the order of the concatenated input, so the
store is byte for byte what the streaming writer makes of the concatenated
batches.  Keys are functions of the job, the task and the chunk: a retried
task rewrites the same bytes, and a resumed job skips the tasks whose
summaries are stored.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, SupportsInt

import anyio
import numpy as np
import numpy.typing as npt

from ...config import tuning
from ...errors import FormatError, InvalidArgumentError
from ...format.grid import row_positions
from .. import inputs, jobs, layout
from ..fragment_attributes import FragmentAttributes
from ..jobs import WriteJob
from ..level import LevelWriter, fragment_shard, level0
from ..store_writer import add_level0_documents
from ..types import WriteConfig, WriteSummary
from . import cells as cell_writers
from .inputs import group_attributes_table, object_attributes_table, object_tables
from .stream import Schema, _ConnectedSpill, _Dtype, _PathSpill, check_roots

CONNECTED = ("graph", "skeleton", "mesh")


def _schema(schema: Schema) -> dict[str, list[Any]]:
    return {k: [np.dtype(d).str, list(r)] for k, (d, r) in schema.items()}


# ----------------------------------------------------------------------------- 1. route


def route_objects(job: WriteJob, index: int, batches: Iterable[Any], *, spill_bytes: int | None = None
                  ) -> dict[str, Any]:
    """Spill one source's vertex rows, sorted by chunk, to ``<job>/spill/<index>.bin``; returns its summary
    (``spill_bytes``: default, this process's ``spill_bytes`` setting)."""
    spill_bytes = tuning().spill_bytes if spill_bytes is None else spill_bytes
    return anyio.run(_route, job, index, batches, spill_bytes, backend="asyncio")


def connected(job: WriteJob) -> bool:
    """Graphs, skeletons and meshes (their links need a second pass), as opposed to paths."""
    return job.geometry in CONNECTED


async def _route(job: WriteJob, index: int, batches: Iterable[Any], spill_bytes: int) -> dict[str, Any]:
    level_layout = job.layout(with_ids=True)
    ex = job.executor()
    dt = _Dtype(None if job.dtype is None else np.dtype(job.dtype))
    with tempfile.TemporaryDirectory(prefix="zvf-route-") as tmp:
        sp: _PathSpill | _ConnectedSpill
        if connected(job):
            sp = _ConnectedSpill(tmp, level_layout, dt, job.bounds, job.geometry, spill_bytes)
        else:
            sp = _PathSpill(tmp, level_layout, dt, job.bounds, "lines" if job.geometry == "line" else "polylines",
                            spill_bytes)
        try:
            jobs.add_source(sp, batches, index)
            sp.rows.finish(len(sp.chunks))
            coords = sp.chunks.coords()
            columns, chunks, counts = await jobs.upload_spill(ex, f"{job.prefix}spill/{index:06d}.bin", sp.rows, coords)
            summary: dict[str, Any] = {
                "n": int(sp.n_rows), "dtype": None if sp.dt.dt is None else np.dtype(sp.dt.dt).str,
                "attributes": _schema(sp.state.get("attributes", {})),
                "columns": columns, "chunks": chunks, "counts": counts, "coords": coords.reshape(-1, level_layout.ndim),
                "lo": np.asarray([] if sp.bounds.lo is None else sp.bounds.lo, np.float64),
                "hi": np.asarray([] if sp.bounds.hi is None else sp.bounds.hi, np.float64),
            }
            if isinstance(sp, _ConnectedSpill):
                sp.records.finish(len(sp.chunks))

                def to_coords(name: str, col: np.ndarray) -> np.ndarray:  # chunk ids of this source -> coords
                    return coords[col] if name == "chunk" else col

                summary["rec_columns"], summary["rec_chunks"], summary["rec_counts"] = await jobs.upload_spill(
                    ex, f"{job.prefix}records/{index:06d}.bin", sp.records, coords, to_coords)
                summary.update({
                    "records": int(sp.n_records), "width": sp.width, "explicit_ids": sp.explicit_ids,
                    "link_attribute_schema": _schema(sp.state.get("link_attributes", {})),
                    "ids": sp.ids.result().astype(np.int64),
                    "roots": np.concatenate(sp.roots or [np.zeros(0, np.int64)]).astype(np.int64)})
            else:
                summary.update({
                    "objects": int(sp.n_objects),
                    "object_attribute_schema": _schema(sp.state.get("object_attributes", {})),
                    "run_gid": np.concatenate(sp.run_gid or [np.zeros(0, np.int64)]).astype(np.int64),
                    "run_count": np.concatenate(sp.run_count or [np.zeros(0, np.int64)]).astype(np.int64),
                    "obj_runs": np.concatenate(sp.obj_runs or [np.zeros(0, np.int64)]).astype(np.int64)})
                for k, parts in sp.obj_attrs.items():
                    summary[f"oattr:{k}"] = np.concatenate(parts)
        finally:
            sp.rows.close()
            if isinstance(sp, _ConnectedSpill):
                sp.records.close()
    await ex.put(f"{job.prefix}map/{index:06d}.npz", jobs.pack_summary(summary))
    return summary


# ----------------------------------------------------------------------------- plan


@dataclass
class ObjectPlan(jobs.GridPlan):
    """An object write's plan: besides the layout and the cell tasks' chunk groups, what the commit
    needs -- paths: the runs; graphs, skeletons, meshes: the distinct object ids and the link layout."""

    runs: cell_writers.PathRuns | None = None
    object_attributes: dict[str, np.ndarray] | None = None  # paths: given per batch, concatenated
    uniq: np.ndarray | None = None  # connected: distinct object ids
    width: int = 2  # connected: endpoints per link record
    link_attributes: dict[str, list[Any]] | None = None  # connected: name -> [dtype, row shape]
    records: int = 0
    row_offsets: np.ndarray | None = None  # connected: first vertex of each source
    record_chunks: list[np.ndarray] | None = None  # connected: per source, rows of its record spill's chunks
    num: int = 0  # objects
    # of vertex_fragments when only they are sharded: cell tasks hand their fragment cells to the commit, which
    # puts the shards (a few bytes per fragment), so task groups need not hold whole fragment shards
    fragment_shard: tuple[int, ...] | None = None


def _check_alike(summaries: list[dict[str, Any]], dtype: str | None, schemas: tuple[tuple[str, str], ...]) -> np.dtype:
    """Sources must agree as batches of one stream do: schemas equal, no position dtype narrowed."""
    full = [(i, s) for i, s in enumerate(summaries) if s["n"]]
    for key, what in schemas:
        first = next(((i, s[key]) for i, s in full if s[key] or key == "attributes"), None)
        for i, s in full:
            if first is not None and s[key] != first[1] and (s[key] or key == "attributes"):
                raise InvalidArgumentError(f"sources[{i}] has {what} {s[key]}, sources[{first[0]}] {first[1]}: "
                                           "every source must carry the same ones")
    if dtype is not None:
        return inputs.position_dtype(np.dtype(np.float32), np.dtype(dtype))
    stored = None
    for i, s in full:
        if s["dtype"] is None:
            continue
        given = np.dtype(s["dtype"])
        if stored is None:
            stored = given
        else:
            inputs.batch_dtype(given, stored, False, f"sources[{i}] positions")
    return inputs.position_dtype(np.dtype(np.float32), stored)


def _located(chunks: np.ndarray, summaries: list[dict[str, Any]], key: str, ndim: int) -> list[np.ndarray]:
    """Per source, the row in ``chunks`` of each chunk its ``key`` lists."""
    return [row_positions(chunks, s[key].reshape(-1, ndim)) if len(s[key]) else np.zeros(0, np.int64)
            for s in summaries]


def plan_objects(job: WriteJob, cfg: WriteConfig, summaries: list[dict[str, Any]], *,
                 rows_per_task: int | None = None) -> ObjectPlan:
    """Check the sources agree, lay the grid out and cut the chunks into task groups (on the driver)."""
    level_layout = job.layout(with_ids=True)
    ndim = level_layout.ndim
    linked = connected(job)
    schemas = (("attributes", "attributes"),) + (
        (("link_attribute_schema", "link_attributes"),) if linked else
        (("object_attribute_schema", "object_attributes"),))
    dtype = _check_alike(summaries, job.dtype, schemas)
    n = int(sum(s["n"] for s in summaries))
    if not linked and not sum(s["objects"] for s in summaries) and job.geometry != "line":
        raise InvalidArgumentError("polylines is empty: nothing to write (0.9.2 refuses this too)")
    lo, hi = jobs.extent(job, summaries)
    every = [s["coords"].reshape(-1, ndim) for s in summaries]
    chunks = np.unique(np.concatenate(every), axis=0) if n else np.zeros((0, ndim), np.int64)  # C order
    layout.check_cells(n, len(chunks), list(job.chunk_shape), lo, hi)
    origin, grid_shape = level_layout.extent(lo, hi)
    spilled = _located(chunks, summaries, "chunks", ndim)
    rows = np.zeros(len(chunks), np.int64)
    for s, idx in zip(summaries, spilled):
        rows[idx] += s["counts"]
    codec = job.codec()
    groups = jobs.chunk_groups(chunks, rows, origin, codec.shard,
                          tuning().rows_per_task if rows_per_task is None else rows_per_task)
    attrs: dict[str, list[Any]] = next((s["attributes"] for s in summaries if s["n"]), {})
    plan = ObjectPlan(n, dtype, {k: (np.dtype(d), tuple(r)) for k, (d, r) in attrs.items()}, lo, hi, origin,
                      grid_shape, chunks, groups, spilled,
                      fragment_shard=fragment_shard(codec, cfg.object_index_layout, grid_shape))
    if linked:
        _plan_links(plan, job, summaries)
        return plan
    at = [row_positions(chunks, c) if len(c) else np.zeros(0, np.int64) for c in every]  # source chunk id -> row
    plan.num = int(sum(s["objects"] for s in summaries))
    plan.runs = cell_writers.PathRuns.build(np.concatenate([a[s["run_gid"]] for a, s in zip(at, summaries)]),
                               np.concatenate([s["run_count"] for s in summaries]),
                               np.concatenate([s["obj_runs"] for s in summaries]), np.arange(len(chunks)))
    names = sorted({k[6:] for s in summaries for k in s if k.startswith("oattr:")})
    if names and cfg.object_attributes is not None:
        raise InvalidArgumentError("object_attributes: give them either per batch or as the argument, not both")
    plan.object_attributes = {k: np.concatenate([s[f"oattr:{k}"] for s in summaries if f"oattr:{k}" in s])
                              for k in names}
    return plan


def _plan_links(plan: ObjectPlan, job: WriteJob, summaries: list[dict[str, Any]]) -> None:
    """Graphs, skeletons, meshes: sources agree on ids and record width; the skeleton roots check."""
    full = [(i, s) for i, s in enumerate(summaries) if s["explicit_ids"] is not None]
    for i, s in full[1:]:
        if s["explicit_ids"] != full[0][1]["explicit_ids"]:
            raise InvalidArgumentError(f"sources[{i}]: either every source has 'object_ids' or none does")
    widths = [(i, s["width"]) for i, s in enumerate(summaries) if s["width"] is not None]
    for i, w in widths[1:]:
        if w != widths[0][1]:
            raise InvalidArgumentError(f"sources[{i}]: faces have {w} vertices, sources[{widths[0][0]}]'s "
                                       f"{widths[0][1]}")
    if job.geometry == "skeleton":
        check_roots([s["roots"] for s in summaries])
    plan.uniq = np.unique(np.concatenate([s["ids"] for s in summaries] or [np.zeros(0, np.int64)]))
    plan.num = len(plan.uniq)
    plan.width = widths[0][1] if widths else (3 if job.geometry == "mesh" else 2)
    plan.link_attributes = next((s["link_attribute_schema"] for s in summaries if s["records"]), {})
    plan.records = int(sum(s["records"] for s in summaries))
    counts = np.asarray([s["n"] for s in summaries], np.int64)
    plan.row_offsets = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    plan.record_chunks = _located(plan.chunks, summaries, "rec_chunks", plan.chunks.shape[1])


# ----------------------------------------------------------------------------- 2. cells


def object_cells(job: WriteJob, index: int, task: dict[str, Any], sources: list[dict[str, Any]]) -> dict[str, Any]:
    """Write the vertex cells of one chunk group (paths: and the links filed under its chunks); ``task`` is
    :func:`cell_task` of the plan, ``sources`` the :func:`~zvf.write.jobs.source_slices` of the group."""
    return anyio.run(_object_cells, job, index, task, sources, backend="asyncio")


def cell_task(plan: ObjectPlan, index: int, fragment_attributes: dict[str, dict[tuple[int, ...], np.ndarray]] | None
              ) -> dict[str, Any]:
    """The small arguments of cell task ``index``: its chunks, the layout and the fragment attribute rows
    of its chunks (paths: their runs wait in the store, :func:`put_runs`)."""
    group = plan.groups[index]
    chunks = plan.chunks[group]
    keys = {tuple(c) for c in chunks.tolist()}
    frag = {name: {k: v for k, v in table.items() if k in keys} for name, table in (fragment_attributes or {}).items()}
    return {"chunks": chunks, "group": group, "dtype": plan.dtype.str, "origin": plan.origin,
            "grid_shape": plan.grid_shape, "fragment_shard": plan.fragment_shard,
            "attributes": {k: (d.str, r) for k, (d, r) in plan.attributes.items()},
            "row_offsets": plan.row_offsets,
            "fragment_attributes": {k: v for k, v in frag.items() if v} or None}


def _runs_key(job: WriteJob, index: int) -> str:
    return f"{job.prefix}runs/{index:06d}.npz"


async def put_runs(job: WriteJob, plan: ObjectPlan, indexes: list[int]) -> None:
    """Paths: each cell task's slice of the runs (:meth:`~.object_cells.PathRuns.for_chunks`, a few integers
    per fragment), uploaded under the job prefix for the task to read: task data goes through the store, not the
    scheduler."""
    if plan.runs is None:
        return
    ex = job.executor()
    for i in range(0, len(indexes), 64):  # a few dozen slices in memory at a time
        await ex.gather([ex.put(_runs_key(job, g), jobs.pack_summary(plan.runs.for_chunks(plan.groups[g], plan.chunks)))
                         for g in indexes[i:i + 64]])


def _local_key(job: WriteJob, chunk: Iterable[SupportsInt]) -> str:
    """Where a cell task leaves a chunk's vertex -> chunk-local row table for the link tasks."""
    return f"{job.prefix}local/{'_'.join(str(int(c)) for c in chunk)}.npz"


class _Pieces:
    """A task's spilled rows by (column, chunk in group), sources in input order."""

    def __init__(self, pieces: dict[str, list[tuple[int, int, np.ndarray]]], offsets: np.ndarray | None):
        self.by_chunk: dict[tuple[str, int], list[np.ndarray]] = {}
        for name, got in pieces.items():
            for k, si, arr in got:
                if name == "vertex" and offsets is not None:  # a source's vertex numbers -> the whole input's
                    arr = arr + offsets[si]
                self.by_chunk.setdefault((name, k), []).append(arr)

    def take(self, name: str, k: int, dtype: np.dtype, row_shape: tuple[int, ...]) -> np.ndarray:
        got = self.by_chunk.pop((name, k), [])
        return np.concatenate(got).astype(dtype, copy=False) if got else np.zeros((0, *row_shape), dtype)


async def _object_cells(job: WriteJob, index: int, task: dict[str, Any], sources: list[dict[str, Any]]
                        ) -> dict[str, Any]:
    ex = job.executor()
    level_layout = job.layout(with_ids=True)
    chunks = task["chunks"]
    ndim = level_layout.ndim
    dtype = np.dtype(task["dtype"])
    rows = _Pieces(await jobs.read_spilled(ex, f"{job.prefix}spill/", sources), task["row_offsets"])
    linked = connected(job)
    work: dict[str, np.ndarray] | None = None
    if not linked:  # paths: this task's runs
        blob = await ex.get(_runs_key(job, index))
        if blob is None:
            raise FormatError(f"{_runs_key(job, index)}: the runs of this cell task are missing")
        work = jobs.unpack_summary(blob, _runs_key(job, index))
    frag_keys, frag_counts = [], []
    async with jobs.cell_writer(ex) as writer:
        level = level0(writer, task["origin"], task["grid_shape"], job.codec(), bool(task["attributes"]),
                       task["fragment_shard"])
        links = None if linked else cell_writers.path_links(level, ndim)
        frag_attrs = FragmentAttributes(task["fragment_attributes"], ndim)
        for k, chunk in enumerate(chunks):
            pos = rows.take("positions", k, dtype, (ndim,))
            attrs = {name: rows.take(f"attr:{name}", k, np.dtype(d), tuple(r))
                     for name, (d, r) in task["attributes"].items()}
            if links is not None:
                assert work is not None  # paths: read above, as links are made
                first, count, b_chunks, b_vi = cell_writers.chunk_slice(work, k)
                if int(count.sum()) != len(pos):
                    raise FormatError(f"{job.prefix}: chunk {tuple(chunk.tolist())} has {len(pos)} spilled rows, "
                                      f"its runs {int(count.sum())}")
                await cell_writers.put_path_chunk(level, links, frag_attrs, chunk, first, count, pos, attrs, b_chunks,
                                                  b_vi)
                continue
            oids = rows.take("object_ids", k, np.dtype(np.int64), ())
            vertex = rows.take("vertex", k, np.dtype(np.int64), ())
            got = await cell_writers.put_connected_chunk(level, frag_attrs, level_layout, chunk, pos, oids, attrs,
                                            job.geometry == "skeleton")
            table = {"vertex": vertex, "local": got.local.astype(np.int64)}
            if got.starts is not None:
                table["starts"] = got.starts
            await ex.put(_local_key(job, chunk), jobs.pack_summary(table))
            frag_keys.append(got.frag_keys)
            frag_counts.append(len(got.frag_keys))
        if links is not None:
            await links.flush()
        fragments = level.arrays.get("vertex_fragments")
        held = fragments.take_buffered() if fragments is not None and task["fragment_shard"] is not None else {}
        await level.finish()  # flushes this group's whole shards; the documents come at commit
    summary: dict[str, Any] = {"cells": writer.cells_written, "bytes": writer.bytes_written,
                               "links": 0 if links is None else int(links.total), "arrays": _arrays(level),
                               **{f"fragment_cells:{k}": v for k, v in held.items()}}
    if linked:
        summary["frag_keys"] = np.concatenate(frag_keys or [np.zeros(0, np.int64)])
        summary["frag_chunk"] = np.repeat(task["group"], frag_counts).astype(np.int64)
        summary["frag_local"] = np.concatenate([np.arange(c, dtype=np.int64) for c in frag_counts]
                                               or [np.zeros(0, np.int64)])
    await ex.put(f"{job.prefix}cells/{index:06d}.npz", jobs.pack_summary(summary))
    return summary


def _arrays(level: LevelWriter) -> list[list[Any]]:
    """The spatial arrays a task wrote cells of: name, document attributes and chunks (for the commit)."""
    return [[name, arr.attributes, [list(c) for c in arr.nonempty]] for name, arr in level.arrays.items()
            if arr.nonempty]


def link_cells(job: WriteJob, index: int, task: dict[str, Any], sources: list[dict[str, Any]]) -> dict[str, Any]:
    """Graphs, skeletons, meshes: write the link cells filed under one chunk group, once every cell task has
    left its chunks' vertex tables; ``task`` is :func:`link_task`, ``sources`` the record spills' slices."""
    return anyio.run(_link_cells, job, index, task, sources, backend="asyncio")


def link_task(plan: ObjectPlan, index: int) -> dict[str, Any]:
    return {"chunks": plan.chunks[plan.groups[index]], "origin": plan.origin, "grid_shape": plan.grid_shape,
            "width": plan.width, "link_attributes": plan.link_attributes, "row_offsets": plan.row_offsets}


async def _link_cells(job: WriteJob, index: int, task: dict[str, Any], sources: list[dict[str, Any]]
                      ) -> dict[str, Any]:
    ex = job.executor()
    ndim = len(job.chunk_shape)
    pieces = await jobs.read_spilled(ex, f"{job.prefix}records/", sources)
    # every chunk the group's records reach: its vertex -> chunk-local row table, from the cell tasks
    ends = np.unique(np.concatenate([a.reshape(-1, ndim) for _, _, a in pieces.get("chunk", [])]
                                    or [np.zeros((0, ndim), np.int64)]), axis=0)
    keys = [_local_key(job, c) for c in ends.tolist()]
    tables = [jobs.unpack_summary(b, k) if b is not None else None for k, b in zip(keys, await ex.gather(
        [ex.get(k) for k in keys]))]
    missing = [k for k, t in zip(keys, tables) if t is None]
    if missing:
        raise FormatError(f"{missing[0]}: a chunk's vertex table is missing (its cell task did not finish)")
    found = [t for t in tables if t is not None]  # every one, after the check above
    vertex = np.concatenate([t["vertex"] for t in found] or [np.zeros(0, np.int64)])
    local = np.concatenate([t["local"] for t in found] or [np.zeros(0, np.int64)])
    skeleton = job.geometry == "skeleton"
    starts = np.concatenate([t["starts"] for t in found] or [np.zeros(0, bool)]) if skeleton else None
    order = np.argsort(vertex, kind="stable")
    vertex = vertex[order]

    def row_of(v: np.ndarray) -> np.ndarray:
        """Row in the tables of each vertex number ``v``."""
        at: npt.NDArray[np.intp] = np.searchsorted(vertex, v).clip(0, max(len(vertex) - 1, 0))
        if len(v) and (not len(vertex) or np.any(vertex[at] != v)):
            raise FormatError(f"{job.prefix}: a link record names a vertex no chunk table holds")
        return order[at]

    recs = _Pieces(pieces, task["row_offsets"])
    width = task["width"]
    async with jobs.cell_writer(ex) as writer:
        level = level0(writer, task["origin"], task["grid_shape"], job.codec(), False)
        links = cell_writers.graph_links(level, ndim, width, task["link_attributes"])
        for k in range(len(task["chunks"])):
            v = recs.take("vertex", k, np.dtype(np.int64), (width,))
            if not len(v):
                continue
            c = recs.take("chunk", k, np.dtype(np.int64), (width, ndim))
            la = {name: recs.take(f"attr:{name}", k, np.dtype(d), tuple(r))
                  for name, (d, r) in task["link_attributes"].items()}
            at = row_of(v.reshape(-1)).reshape(v.shape)
            await cell_writers.put_link_records(links, c, local[at], la, None if starts is None else starts[at[:, 0]])
        await level.finish()
    summary = {"cells": writer.cells_written, "bytes": writer.bytes_written, "links": int(links.total),
               "arrays": _arrays(level)}
    await ex.put(f"{job.prefix}links/{index:06d}.npz", jobs.pack_summary(summary))
    return summary


# ----------------------------------------------------------------------------- 3. commit


async def commit_objects(job: WriteJob, cfg: WriteConfig, plan: ObjectPlan, cells: list[dict[str, Any]],
                         fragment_attributes: FragmentAttributes) -> WriteSummary:
    """Documents, object index and tables over the cells the tasks wrote; root last; then the job prefix goes.

    ``cells``: the summaries of every cell task, then (graphs, skeletons, meshes) of every link task.
    """
    level_layout = job.layout(with_ids=True)
    ndim = level_layout.ndim
    ex = job.executor()
    num = plan.num
    linked = connected(job)
    if linked:
        assert plan.uniq is not None  # _plan_links set it
        obj_attrs, group_rows, grp_attrs = object_tables(plan.uniq, cfg.object_attributes, cfg.groups,
                                                         cfg.group_attributes)
        arrays_present = ["vertices", "links", "object_index"]
    else:
        obj_attrs = object_attributes_table(
            cfg.object_attributes if cfg.object_attributes is not None else plan.object_attributes, num)
        group_rows = inputs.groups_table(cfg.groups, np.arange(num, dtype=np.int64))
        grp_attrs = group_attributes_table(cfg.group_attributes, group_rows)
        arrays_present = ["vertices", "object_index"]
        if job.geometry == "line" and plan.attributes:
            arrays_present.append("vertex_attributes")
    async with jobs.commit_writer(ex, overwrite=cfg.overwrite, consolidate=cfg.consolidate) as writer:
        level = level0(writer, plan.origin, plan.grid_shape, job.codec(), bool(plan.attributes), plan.fragment_shard)
        for i, c in enumerate(cells):
            for name, attributes, nonempty in c["arrays"]:
                level.array(name, attributes).nonempty.extend(tuple(int(x) for x in chunk) for chunk in nonempty)
            if "fragment_cells:shard" in c:  # the fragment shards are put here (see ObjectPlan.fragment_shard)
                level.arrays["vertex_fragments"].adopt({k: c[f"fragment_cells:{k}"]
                                                        for k in ("shard", "inner", "lengths", "bytes")},
                                                       f"{job.prefix}cells/{i:06d}.npz")
        if not len(plan.chunks):
            await cell_writers.put_no_rows(level, ndim, plan.dtype, plan.attributes)
        fragment_attributes.finish(writer, arrays_present)
        if linked:
            links = cell_writers.graph_links(level, ndim, plan.width, plan.link_attributes or {})
        else:
            links = cell_writers.path_links(level, ndim)
        links.total = sum(int(c["links"]) for c in cells)
        await level.finish()
        links.finish()
        if linked:
            cell = [c for c in cells if "frag_keys" in c]
            frag_keys, frag_chunk, frag_local = (np.concatenate([c[k] for c in cell] or [np.zeros(0, np.int64)])
                                                 for k in ("frag_keys", "frag_chunk", "frag_local"))
            fragments = len(frag_keys)
            assert plan.uniq is not None  # _plan_links set it
            await cell_writers.put_connected_index(writer, frag_keys, frag_chunk, frag_local, plan.uniq, plan.chunks,
                                                   ndim,
                                                   compression=cfg.compression, layout=cfg.object_index_layout)
        else:
            assert plan.runs is not None  # plan_objects set it for paths
            fragments = len(plan.runs.run_gid)
            await cell_writers.put_path_index(writer, plan.runs, plan.chunks, num, ndim, compression=cfg.compression,
                                              layout=cfg.object_index_layout)
        await cell_writers.put_tables(writer, obj_attrs, group_rows, grp_attrs, cfg.compression)
        add_level0_documents(writer, ex.handle.url, geometry=job.geometry, n=plan.n, arrays_present=arrays_present,
                             chunk_shape=list(job.chunk_shape), bounds=(plan.lo, plan.hi),
                             bin_shape=None if job.bin_shape is None else list(job.bin_shape))
    await jobs.discard(job)
    counts: dict[str, Any] = ({"link_count": plan.records, "stored_link_count": int(links.total)} if linked else
                              {"cross_chunk_link_count": int(links.total)})
    return WriteSummary(
        url=ex.handle.url, geometry=job.geometry, object_count=num, vertex_count=plan.n, chunk_count=len(plan.chunks),
        fragment_count=fragments, group_count=len(group_rows),
        cells_written=writer.cells_written + sum(c["cells"] for c in cells),
        bytes_written=writer.bytes_written + sum(c["bytes"] for c in cells), requests=ex.stats.snapshot(), **counts)
