"""Rewriting a store with another layout: chunk/bin shape, compression, sharding.

A store is turned back into the input of its writer and written again;
rows come out in stored order, which the writers' stable sort maps to the
same layout as the original input would.  Both kinds stream into the
spilling writers, so memory stays bounded by a batch, not the store: point
clouds a batch of source chunks at a time, object geometries a batch of
whole objects at a time (:func:`object_batches`) -- see docs/LIFECYCLE.md.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from types import EllipsisType
from typing import Any

import numpy as np

from ..config import tuning
from ..errors import InvalidArgumentError, StoreExistsError
from ..io.executor import Executor
from ..io.options import StorageOptions
from ..io.store import Target, open_store
from ..read.dataset import DatasetReader
from ..read.sweep import object_batches as object_selections
from ..write import layout
from ..write.lock import StoreLock
from ..write.objects.memory import write_graph, write_lines, write_mesh, write_polylines
from ..write.points.memory import write_points
from ..write.publish import holding, shaping_root
from ..write.types import Shape, WriteSummary
from .carry import carry_root

Writer = Callable[..., Awaitable[WriteSummary]]
"""One of the writers (``write_points``, ``write_polylines``, ...): target and input first, then its keywords."""

WRITERS: dict[str, Writer] = {
    "point_cloud": write_points, "polyline": write_polylines, "streamline": write_polylines, "line": write_lines,
    "graph": write_graph, "skeleton": write_graph, "mesh": write_mesh}
"""The writer of each geometry (appends and rechunks rewrite a store through it)."""


Batch = dict[str, Any]
"""One batch of a streaming writer's input (``positions``, ``attributes``, ... as the writer takes them)."""


async def store_options(ds: DatasetReader) -> dict[str, Any]:
    """The layout options a store was written with, as writer keywords (shapes as recorded)."""
    root = ds.root.raw.get("attributes", {}).get("zarr_vectors", {})
    level = await ds.level(0)
    verts = level.arrays["vertices"]
    codec = verts.codec
    comp = [{"name": n, "configuration": dict(c)} for n, c in codec.compressors] or None  # verbatim, levels kept
    manifests = (await ds.family(0, "object_index")).array("object_index/manifests") if ds.has_objects(0) else None
    return {
        "chunk_shape": root.get("chunk_shape", list(ds.chunk_shape)),
        "bin_shape": root.get("base_bin_shape"),
        "compression": comp,
        "shard_shape": None if codec.shard is None else list(codec.shard),
        "object_index_layout": "sharded" if manifests is None or manifests.codec.shard else "reference",
        "dtype": verts.meta.raw.get("attributes", {}).get("dtype", "float32"),
    }


async def level_tables(ds: DatasetReader) -> dict[str, Any]:
    """Object attributes, groups and group attributes of level 0 (writer keywords)."""
    out: dict[str, Any] = {}
    level = await ds.family(0, "object_attributes")
    names = level.named("object_attributes")
    if names:
        out["object_attributes"] = {n: await ds.object_attribute(n) for n in names}
    level = await ds.family(0, "groups")
    if level.array("groups") is not None:
        out["groups"] = dict(enumerate(await ds.groups()))
        gnames = (await ds.family(0, "group_attributes")).named("group_attributes")
        if gnames:
            out["group_attributes"] = {n: await ds.group_attribute(n) for n in gnames}
    return out


async def object_batches(ds: DatasetReader, batch: int) -> AsyncIterator[Batch]:
    """Level 0 of an object store as batches of its streaming writer's input, ``batch`` objects each,
    in id order (:func:`zvf.read.sweep.object_batches`)."""
    geometry = ds.geometry_type
    async for sel in object_selections(ds, batch=batch):
        assert sel.offsets is not None  # an object selection has its objects' row offsets
        if geometry == "line":
            m = len(sel.offsets) - 1
            yield {"endpoints": sel.positions.reshape(m, 2, -1),
                   "attributes": {n: a.reshape(m, 2, *a.shape[1:]) for n, a in sel.attributes.items()}}
        elif geometry in ("polyline", "streamline"):
            cuts = sel.offsets[1:-1]
            yield {"polylines": np.split(sel.positions, cuts),
                   "attributes": {n: np.split(a, cuts) for n, a in sel.attributes.items()}}
        elif geometry == "mesh":
            yield {"positions": sel.positions, "faces": sel.faces, "object_ids": sel.object_ids,
                   "attributes": sel.attributes}
        else:
            yield {"positions": sel.positions, "edges": sel.edges, "object_ids": sel.object_ids,
                   "attributes": sel.attributes, "link_attributes": sel.link_attributes}


async def rechunk(source: Target, target: Target, *, chunk_shape: Shape | None = None, bin_shape: Shape | None = None,
                  by_attribute: str | None = None, compression: str | list[dict[str, Any]] | EllipsisType | None = ...,
                  shard_shape: int | Sequence[int] | EllipsisType | None = ...,
                  object_index_layout: str | EllipsisType = ..., overwrite: bool = False,
                  storage_options: StorageOptions | None = None, target_storage_options: StorageOptions | None = None,
                  batch_chunks: int | None = None, retention: float | None = None) -> WriteSummary:
    """Copy ``source`` to ``target`` with a new layout; unnamed options keep the source's.

    ``chunk_shape`` / ``bin_shape`` may be ``"auto"``.  Point clouds stream
    ``batch_chunks`` source chunks at a time (default ``tuning().rewrite_batch_chunks``), object geometries
    ``tuning().rewrite_object_batch`` whole objects at a time.  ``by_attribute`` names the
    point attribute to chunk by (an attribute-chunked target, written from
    memory); None writes a spatial store, also from an attribute-chunked source.

    ``target`` may be ``source`` itself (with ``overwrite=True``): a rechunk in place holds the store's
    lock from its first read to its commit, and readers of the old layout keep reading it for ``retention``
    seconds (default: the store's; :mod:`zvf.write.publish`).
    """
    rewrite = functools.partial(
        _rechunk, target=target, chunk_shape=chunk_shape, bin_shape=bin_shape, by_attribute=by_attribute,
        compression=compression, shard_shape=shard_shape, object_index_layout=object_index_layout,
        overwrite=overwrite, target_storage_options=target_storage_options,
        batch_chunks=tuning().rewrite_batch_chunks if batch_chunks is None else batch_chunks)
    here = open_store(target, mode="a", storage_options=target_storage_options)
    if here.url != open_store(source, storage_options=storage_options).url:
        return await rewrite(await DatasetReader.open(source, storage_options=storage_options))
    if not overwrite:
        raise StoreExistsError(f"{here.url}: rechunking a store in place replaces it; pass overwrite=True")
    ex = Executor(here)
    async with StoreLock(ex, here.url, purpose="rechunk in place") as lock:
        # under the lock: the version it rewrites
        ds = await DatasetReader.open(source, storage_options=storage_options)
        with holding(lock, ds.version, retention):
            return await rewrite(ds)


async def _rechunk(ds: DatasetReader, target: Target, *, chunk_shape: Shape | None, bin_shape: Shape | None,
                   by_attribute: str | None, compression: str | list[dict[str, Any]] | EllipsisType | None,
                   shard_shape: int | Sequence[int] | EllipsisType | None, object_index_layout: str | EllipsisType,
                   overwrite: bool, target_storage_options: StorageOptions | None,
                   batch_chunks: int) -> WriteSummary:
    """:func:`rechunk` from the opened source ``ds`` (closed at the end)."""
    try:
        opts = await store_options(ds)
        if chunk_shape is not None:
            opts["chunk_shape"] = chunk_shape
            opts["bin_shape"] = bin_shape
        elif bin_shape is not None:
            opts["bin_shape"] = bin_shape
        for name, value in (("compression", compression), ("shard_shape", shard_shape),
                            ("object_index_layout", object_index_layout)):
            if value is not ...:
                opts[name] = value
        lo, hi = ds.bounds  # "auto" from the source's extent and vertex count, before streaming
        opts["chunk_shape"], opts["bin_shape"] = layout.resolve(
            opts["chunk_shape"], opts["bin_shape"], lo, hi, (await ds.level(0)).meta.vertex_count)
        write_kw = dict(opts, overwrite=overwrite, storage_options=target_storage_options)
        if by_attribute is not None and ds.geometry_type != "point_cloud":
            raise InvalidArgumentError(f"by_attribute: only point clouds can be chunked by an attribute, "
                                       f"{ds.url} holds {ds.geometry_type!r}")
        source_root = ds.root.raw
        # what the source's root carried besides its layout (:mod:`.carry`) is in the root the writer publishes
        with shaping_root(open_store(target, mode="a", storage_options=target_storage_options).url,
                          lambda root: carry_root(source_root, root, same_store=False)):
            if ds.geometry_type == "point_cloud":
                return await _rechunk_points(ds, target, write_kw, batch_chunks, by_attribute)
            return await _rechunk_objects(ds, target, write_kw)
    finally:
        await ds.close()


async def _rechunk_objects(ds: DatasetReader, target: Target, write_kw: dict[str, Any]) -> WriteSummary:
    """An object store through its streaming writer, whole objects a batch at a time."""
    geometry = ds.geometry_type
    if geometry not in WRITERS:
        raise InvalidArgumentError(f"geometry {geometry!r} of {ds.url} cannot be rewritten")
    ids = await ds.object_ids()
    if geometry in ("polyline", "streamline", "line") and not np.array_equal(ids, np.arange(len(ids))):
        raise InvalidArgumentError(f"{ds.url}: {geometry} object ids are not 0..P-1; cannot rewrite")
    kw = await level_tables(ds)
    if geometry in ("polyline", "streamline", "graph", "skeleton"):
        kw["geometry_type"] = geometry
    lo, hi = ds.bounds
    return await WRITERS[geometry](target, object_batches(ds, tuning().rewrite_object_batch),
                                   bounds=(lo.tolist(), hi.tolist()), **kw, **write_kw)


async def point_batches(ds: DatasetReader, *, batch_chunks: int) -> AsyncIterator[Batch]:
    """Level 0 of a point cloud as batches of the streaming writer's input, ``batch_chunks`` chunks each."""
    async with ds.iter_chunks(attributes=None, batch_chunks=batch_chunks) as stream:
        async for sel in stream:
            batch: Batch = {"positions": sel.positions, "attributes": sel.attributes}
            if sel.object_ids is not None:
                batch["object_ids"] = sel.object_ids
            yield batch


async def category_batches(ds: DatasetReader) -> AsyncIterator[Batch]:
    """Level 0 of an attribute-chunked point cloud, one category per batch, its attribute included
    (rebuilt from the category axis; the chunk-order reader of :func:`point_batches` leaves it out)."""
    for value in (await ds.level(0)).categories or ():
        sel = await ds.read_all(categories=[value])
        yield {"positions": sel.positions, "attributes": sel.attributes, "object_ids": sel.object_ids}


async def _in_memory(batches: AsyncIterator[Batch]) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray | None]:
    """(positions, attributes, object ids) of every batch, concatenated: the attribute-chunked
    writer needs its whole input."""
    parts = [b async for b in batches]
    ids = [b["object_ids"] for b in parts if b.get("object_ids") is not None]
    return (np.concatenate([b["positions"] for b in parts]),
            {n: np.concatenate([b["attributes"][n] for b in parts]) for n in parts[0]["attributes"]},
            np.concatenate(ids) if ids else None)


async def _rechunk_points(ds: DatasetReader, target: Target, write_kw: dict[str, Any], batch_chunks: int,
                          by_attribute: str | None) -> WriteSummary:

    """A point cloud through the spilling writer, one batch of source chunks (or categories) at a time;
    into an attribute-chunked target through the in-memory writer."""
    tables = await level_tables(ds)
    lo, hi = ds.bounds
    kw = dict(bounds=(lo.tolist(), hi.tolist()), **tables, **write_kw)
    level = await ds.level(0)
    shard = kw.get("shard_shape")
    if level.categories is not None and by_attribute is None and shard is not None and len(shard) == level.key_ndim:
        kw["shard_shape"] = list(shard)[1:]  # the source's category axis goes away
    batches = (category_batches(ds) if level.categories is not None
               else point_batches(ds, batch_chunks=batch_chunks))
    if by_attribute is None:
        return await write_points(target, batches, **kw)
    if level.meta.vertex_count == 0:
        raise InvalidArgumentError(f"by_attribute={by_attribute!r}: {ds.url} has no points to chunk by it")
    pos, attrs, ids = await _in_memory(batches)
    return await write_points(target, pos, attributes=attrs, object_ids=ids, chunk_by_attribute=by_attribute, **kw)
