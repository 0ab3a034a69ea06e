"""``zvf.dask.to_dask`` / ``zvf.dask.export``: a level as a Dask DataFrame, or as one file per partition.

The driver plans (chunk batches of a point cloud; for an object geometry,
objects grouped by the chunk window holding their last chunk, as the serial
export's sweep goes), each task opens the store from its spec and reads its
batch.  Columns and rows are those of the serial export (``zvf.read.writers``):
the concatenated partitions of a point cloud equal its vertex table; those of
an object geometry hold the same objects with the same rows (and edges/faces
with ``table=``), in window order -- the serial export's order for a level
larger than its sweep cache, ids ascending for a smaller one.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, TypedDict

import anyio
import numpy as np

from ..errors import InvalidArgumentError
from ..read.dataset import AttributeNames, DatasetReader
from ..read.selection import Selection
from .run import Progress, compute, need_dask, spec_of

if TYPE_CHECKING:
    from ..format.manifest import ManifestTable
    from ..io.options import StorageOptions
    from ..read.query import BBox

TABLES = ("vertices", "edges", "faces")

Box = tuple[np.ndarray, np.ndarray]
"""A checked closed box (lo, hi)."""


class _ExportPlan(TypedDict):
    """The partitions of a Dask export: chunk coords (``kind`` "chunks") or object ids ("objects") each, the
    attributes, the box, an empty Selection of the right shape and the link table of object geometries."""

    kind: str
    parts: list[np.ndarray]
    names: list[str]
    box: Box | None
    template: Selection
    links: str | None


class ExportSummary(TypedDict):
    """What ``zvf.dask.export`` returns: the files written, the vertices, partitions, format and seconds."""

    files: list[str]
    vertices: int
    partitions: int
    format: str
    seconds: float


async def _object_tables(url: str, opts: StorageOptions | None, level: int, out: str, fmt: str) -> list[str]:
    """``out/objects.<fmt>`` and ``out/groups.<fmt>``: the serial export's companion tables (written by the
    driver: dense arrays, small beside the vertices)."""
    from ..read.export import object_tables
    from ..read.writers import write_whole_table

    async with await DatasetReader.open(url, storage_options=opts) as ds:
        tables = await object_tables(ds, level) if ds.has_objects(level) else {}
    return [write_whole_table(os.path.join(out, f"{table}.{fmt}"), fmt, arrays)
            for table, arrays in tables.items()]


async def _plan(url: str, opts: StorageOptions | None, level: int, bbox: BBox | None, attributes: AttributeNames,
                batch_chunks: int, batch_objects: int | None) -> _ExportPlan:
    """Batches (chunk coords or object ids), attribute names and an empty Selection of the right shape."""
    from ..format.grid import check_bbox
    from ..read.load import LINKED, SEQUENTIAL
    from ..read.points import pick_attributes, read_chunks
    from ..read.writers import link_table

    for name, v in (("batch_chunks", batch_chunks), ("batch_objects", batch_objects)):
        if name == "batch_objects" and v is None:  # a chunk window's objects per partition
            continue
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise InvalidArgumentError(f"{name} must be an integer >= 1, got {v!r}")
    async with await DatasetReader.open(url, storage_options=opts) as ds:
        lvl = await ds.level(level)
        names = pick_attributes(lvl, attributes)
        by_object = ds.geometry_type in SEQUENTIAL | LINKED and ds.has_objects(lvl.index)
        if by_object:
            if bbox is not None:
                raise InvalidArgumentError("bbox: a Dask export of an object geometry exports whole objects; "
                                           "select them with a query instead")
            template = await ds.read_objects(np.zeros(0, np.int64), level=level, attributes=names, combined=True)
            parts = object_parts(*await ds.context.manifests(lvl.index), lvl.nonempty_chunks, batch_chunks,
                                 batch_objects)
        else:
            box = None if bbox is None else check_bbox(bbox, ds.ndim)
            chunks = lvl.nonempty_chunks if box is None else lvl.chunks_in(*box)
            template = await read_chunks(ds.context, lvl, chunks[:0], names)
            parts = [chunks[i:i + batch_chunks] for i in range(0, len(chunks), batch_chunks)]
        return {"kind": "objects" if by_object else "chunks", "parts": parts, "names": names,
                "box": None if by_object else box,
                "template": template, "links": link_table(ds.geometry_type) if by_object else None}


def object_parts(oids: np.ndarray, table: ManifestTable, chunks: np.ndarray, batch_chunks: int,
                 batch_objects: int | None) -> list[np.ndarray]:
    """Object ids by partition: grouped by the window of ``batch_chunks`` chunks (store order) that holds
    each object's last chunk, ids ascending inside a window, at most ``batch_objects`` per partition
    (None: a window each).

    So a partition reads about its window's chunks and the neighbours its objects reach into, not the
    whole level: ids in ``object_ids`` order are rarely near each other in space, and partitions cut
    from that order would each fetch most cells of the level.
    """
    from ..read.sweep import last_chunks

    window_of = last_chunks(chunks, table, len(oids))[1] // batch_chunks
    order = np.argsort(window_of, kind="stable")
    parts = []
    for rows in np.split(order, np.flatnonzero(np.diff(window_of[order])) + 1) if len(order) else []:
        step = batch_objects or len(rows)
        parts += [oids[rows[i:i + step]] for i in range(0, len(rows), step)]
    return parts


async def _read(url: str, opts: StorageOptions | None, level: int, kind: str, part: np.ndarray, names: list[str],
                box: Box | None) -> Selection:
    from ..read.points import read_chunks

    async with await DatasetReader.open(url, storage_options=opts) as ds:
        if kind == "objects":
            return await ds.read_objects(part, level=level, attributes=names, combined=True)
        return await read_chunks(ds.context, await ds.level(level), part, names, box=box)


def _frame(sel: Selection, table: str) -> Any:  # a pandas DataFrame (pandas is optional and unannotated here)
    """The pandas table of one batch, columns as the serial export names them."""
    import pandas as pd

    from ..read.columns import flat_columns, link_arrays, vertex_arrays

    arrays = vertex_arrays(sel) if table == "vertices" else link_arrays(sel, table)
    return pd.DataFrame(dict(flat_columns(arrays)))


def _read_frame(url: str, opts: StorageOptions | None, level: int, kind: str, part: np.ndarray, names: list[str],
                box: Box | None, table: str) -> Any:  # a pandas DataFrame
    sel = anyio.run(_read, url, opts, level, kind, part, names, box, backend="asyncio")
    return _frame(sel, table)


def to_dask(target: Any, *, level: int = 0, bbox: BBox | None = None, attributes: AttributeNames = None,
            table: str = "vertices", batch_chunks: int = 16, batch_objects: int | None = None,
            storage_options: StorageOptions | None = None) -> Any:  # a dask DataFrame
    """A level (or the points of a point cloud in the closed box ``bbox``) as a dask DataFrame.

    One partition per ``batch_chunks`` chunks (point clouds), or per window
    of ``batch_chunks`` chunks and at most ``batch_objects`` objects (object
    geometries, with ``object_id`` and ``vertex_index``; see the module
    docstring for their order).  ``table="edges"``/``"faces"`` gives the link table of
    graphs, skeletons and meshes instead, ``v0, v1[, v2]`` local to the object.
    """
    dask = need_dask()
    import dask.dataframe as dd

    if table not in TABLES:
        raise InvalidArgumentError(f"table must be one of {TABLES}, got {table!r}")
    url, opts = spec_of(target, storage_options)
    p = anyio.run(_plan, url, opts, level, bbox, attributes, batch_chunks, batch_objects, backend="asyncio")
    if table != "vertices" and p["links"] != table:
        raise InvalidArgumentError(f"table={table!r}: this store's objects have "
                                   f"{'no link table' if p['links'] is None else p['links']}")
    meta = _frame(p["template"], table)
    read = dask.delayed(_read_frame, pure=True)
    parts = [read(url, opts, level, p["kind"], part, p["names"], p["box"], table) for part in p["parts"]]
    if not parts:
        return dd.from_pandas(meta, npartitions=1)  # type: ignore[no-untyped-call]  # dask.dataframe's
    return dd.from_delayed(parts, meta=meta, verify_meta=False)


def _write_part(url: str, opts: StorageOptions | None, level: int, kind: str, part: np.ndarray, names: list[str],
                box: Box | None, path: str, fmt: str, template: Selection, links: str | None) -> int:
    from ..read.writers import open_writer

    sel = anyio.run(_read, url, opts, level, kind, part, names, box, backend="asyncio")
    writer = open_writer(path, fmt, template, links, rows=len(sel))
    try:
        writer.write(sel)
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return len(sel)


def export(target: Any, out: str | os.PathLike[str], *, format: str = "parquet", level: int = 0,
           attributes: AttributeNames = None, batch_chunks: int = 16, batch_objects: int | None = None,
           storage_options: StorageOptions | None = None, client: Any = None,
           progress: Progress | None = None) -> ExportSummary:

    """Write a level as ``out/part.NNNNN.<format>``, one file per partition (with ``.edges``/``.faces`` files).

    The files, read in name order and concatenated, hold what ``zvf export``
    writes into one file (objects in window order: see the module docstring).
    Each is written under a temporary name and renamed when complete, so a
    retried task replaces it.  Returns files, vertices, partitions and seconds.
    """
    dask = need_dask()
    from ..read.writers import STDOUT, companion, format_of

    if os.fspath(out) == STDOUT:
        raise InvalidArgumentError("a Dask export writes a directory of parts; export to stdout ('-') without Dask")
    fmt = format_of(str(out), format)
    out = os.path.abspath(os.fspath(out))
    if not os.path.isdir(os.path.dirname(out)):
        raise InvalidArgumentError(f"output directory {os.path.dirname(out)!r} of {out!r} does not exist")
    if os.path.lexists(out) and (os.path.islink(out) or not os.path.isdir(out)):
        raise InvalidArgumentError(f"output {out!r} exists and is not a directory: a Dask export writes a "
                                   f"directory of parts there")
    os.makedirs(out, exist_ok=True)
    t0 = time.perf_counter()
    url, opts = spec_of(target, storage_options)
    p = anyio.run(_plan, url, opts, level, None, attributes, batch_chunks, batch_objects, backend="asyncio")
    write = dask.delayed(_write_part, pure=False)
    paths = [os.path.join(out, f"part.{i:05d}.{fmt}") for i in range(len(p["parts"]))]
    counts = compute([write(url, opts, level, p["kind"], part, p["names"], p["box"], path, fmt, p["template"],
                            p["links"]) for part, path in zip(p["parts"], paths)],
                     client=client, progress=progress, stage="export")
    files = paths + ([companion(x, p["links"]) for x in paths] if p["links"] and fmt != "npz" else [])
    files += anyio.run(_object_tables, url, opts, level, out, fmt, backend="asyncio")
    return {"files": files, "vertices": int(sum(counts)), "partitions": len(paths), "format": fmt,
            "seconds": time.perf_counter() - t0}
