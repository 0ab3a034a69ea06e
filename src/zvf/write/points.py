"""Point-cloud writer: the same bytes zarr-vectors 0.9.2's ``write_points`` produces.

Without object ids every chunk holds one range fragment per bin (empty bins
included) with rows sorted by bin; with object ids one fragment per
(object, chunk), rows grouped by ascending object id, and an object index.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InvalidArgumentError
from ..format import metadata as md
from ..format.codecs import CellCodec
from ..format.fragments import FragmentIndex, encode_fragment_index
from ..format.grid import Grid
from ..io.executor import Executor
from ..io.store import open_store
from . import inputs
from .engine import (
    SpatialArrayOut,
    StoreWriter,
    add_level0_documents,
    empty_group,
)
from .object_index import ZSTD, put_groups, put_object_attributes, put_object_index
from .partition import Partition, partition


def shard_tuple(shard_shape, ndim: int):
    if shard_shape is None:
        return None
    if isinstance(shard_shape, (int, np.integer)):
        if shard_shape < 1:
            raise InvalidArgumentError(f"shard_shape must be >= 1, got {shard_shape}")
        return (int(shard_shape),) * ndim
    shard = tuple(int(s) for s in shard_shape)
    if len(shard) != ndim or any(s < 1 for s in shard):
        raise InvalidArgumentError(f"shard_shape must be an int or {ndim} ints >= 1, got {shard_shape!r}")
    return shard


class LevelWriter:
    """Spatial arrays of one level sharing a grid layout and codec."""

    def __init__(self, writer: StoreWriter, level: int, origin, grid_shape, codec: CellCodec):
        self.writer = writer
        self.level = level
        self.origin = origin
        self.grid_shape = grid_shape
        self.codec = codec
        self.arrays: dict[str, SpatialArrayOut] = {}

    def array(self, name: str, attributes: dict) -> SpatialArrayOut:
        if name not in self.arrays:
            self.arrays[name] = SpatialArrayOut(f"{self.level}/{name}", self.codec, self.origin, self.grid_shape,
                                                attributes)
        return self.arrays[name]

    async def finish(self) -> None:
        for arr in self.arrays.values():
            await arr.finish(self.writer)


async def put_rows(level: LevelWriter, part: Partition, positions: np.ndarray, attributes: dict[str, np.ndarray],
                   fragments_of, attribute_docs: dict[str, dict] | None = None) -> None:
    """Upload vertices, fragment indexes and attributes of every chunk of a partition.

    ``attribute_docs`` overrides the document attributes of named vertex attributes.
    """
    def little(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<"), copy=False))

    sorted_pos = little(positions[part.order])
    sorted_attrs = {n: little(a[part.order]) for n, a in attributes.items()}
    verts = level.array("vertices", md.vertices_attributes(positions.dtype))
    frags = level.array("vertex_fragments", md.vertex_fragments_attributes())
    docs = attribute_docs or {}
    attr_out = {
        n: level.array(f"vertex_attributes/{n}",
                       docs.get(n) or md.vertex_attribute_attributes(n, a.dtype, a.shape[1:]))
        for n, a in attributes.items()
    }
    for k, chunk in enumerate(part.chunks.tolist()):
        lo, hi = int(part.chunk_starts[k]), int(part.chunk_starts[k + 1])
        await verts.add(level.writer, chunk, sorted_pos[lo:hi].tobytes())
        await frags.add(level.writer, chunk, encode_fragment_index(fragments_of(k)))
        for n, out in attr_out.items():
            await out.add(level.writer, chunk, sorted_attrs[n][lo:hi].tobytes())


@dataclass
class PointExtras:
    """Per-object and per-group data of a point cloud, checked before anything is written."""

    object_attributes: dict[str, np.ndarray]
    group_rows: list[np.ndarray]
    group_attributes: dict[str, np.ndarray]

    @classmethod
    def check(cls, uniq, object_attributes, groups, group_attributes, known_ids) -> PointExtras:
        """``known_ids``: ids group members must belong to (None when every vertex is its own object)."""
        if object_attributes and uniq is None:
            raise InvalidArgumentError("object_attributes need object_ids")
        group_rows = inputs.groups_table(groups, known_ids)
        if group_attributes and not group_rows:
            raise InvalidArgumentError("group_attributes need groups")
        return cls(inputs.row_attributes(object_attributes, 0 if uniq is None else len(uniq), "object_attributes"),
                   group_rows, inputs.row_attributes(group_attributes, len(group_rows), "group_attributes"))


def manifest_rows(frag_chunk, frag_keys, chunks, uniq):
    """(object row, chunk coords, fragment) per block, objects in id order, chunks ascending.

    ``frag_chunk`` (grouped by chunk) indexes ``chunks``; ``frag_keys`` holds each
    fragment's object id.
    """
    local_frag = np.arange(len(frag_chunk)) - np.searchsorted(frag_chunk, frag_chunk)
    obj_row = np.searchsorted(uniq, frag_keys)
    order = np.lexsort((frag_chunk, obj_row))
    return obj_row[order], chunks[frag_chunk[order]], local_frag[order]


async def publish_level(writer: StoreWriter, url: str, *, grid: Grid, shapes, bounds, n: int, has_attributes: bool, uniq,
                        manifest, extras: PointExtras, compression, object_index_layout: str) -> None:
    """Everything of a point cloud after its cells: object index, per-object/group data, level, root.

    ``shapes``: (chunk_shape, bin_shape) as the caller gave them -- 0.9.2 records ints as ints.
    """
    arrays_present = ["vertices"] + (["vertex_attributes"] if has_attributes else [])
    if uniq is not None:
        arrays_present.append("object_index")
        await put_object_index(writer, 0, *manifest, uniq, grid.ndim, compression=compression,
                               layout=object_index_layout)
    # 0.9.2's write_points compresses per-object and per-group tables with zstd whatever the cells use.
    await put_object_attributes(writer, 0, extras.object_attributes, ZSTD)
    await put_groups(writer, extras.group_rows, extras.group_attributes, ZSTD)
    add_level0_documents(writer, url, geometry="point_cloud", n=n, arrays_present=arrays_present,
                         chunk_shape=shapes[0], bounds=bounds, bin_shape=shapes[1])


async def write_points(
    target,
    positions,
    *,
    chunk_shape,
    bin_shape=None,
    bounds=None,
    attributes=None,
    object_ids=None,
    object_attributes=None,
    groups=None,
    group_attributes=None,
    compression=None,
    shard_shape=None,
    dtype="float32",
    overwrite: bool = False,
    object_index_layout: str = "sharded",
    storage_options=None,
) -> dict:
    """Write a point cloud to ``target``; returns a summary (counts, requests, bytes).

    ``object_index_layout="reference"`` writes manifests exactly as 0.9.2 does;
    the default ("sharded") lets a reader fetch one object's manifest alone.

    ``positions`` may also be an iterable or async iterable of batches (see
    ``zvf.write.stream``): streamed through local spill files, same bytes.
    """
    from .stream import is_batch_stream

    if is_batch_stream(positions):
        if attributes is not None or object_ids is not None:
            raise InvalidArgumentError("with batches, pass attributes and object_ids inside each batch")
        from .stream import write_points_stream

        return await write_points_stream(
            target, positions, chunk_shape=chunk_shape, bin_shape=bin_shape, bounds=bounds,
            object_attributes=object_attributes, groups=groups, group_attributes=group_attributes,
            compression=compression, shard_shape=shard_shape, dtype=dtype, overwrite=overwrite,
            object_index_layout=object_index_layout, storage_options=storage_options)
    pos = inputs.positions_array(positions, dtype)
    n, ndim = pos.shape
    grid = Grid.create(chunk_shape, bin_shape, ndim=ndim)
    codec = CellCodec.for_writing(compression, shard_tuple(shard_shape, ndim))
    lo, hi = inputs.bounds_for(pos, bounds, ndim)
    attrs = inputs.row_attributes(attributes, n, "attributes")
    oids = None if object_ids is None else inputs.integer_ids(object_ids, n, "object_ids")
    if groups is not None and oids is None:
        oids = np.arange(n, dtype=np.int64)  # 0.9.2: with groups but no ids every vertex is an object
    uniq = None if oids is None else np.unique(oids)
    extras = PointExtras.check(uniq, object_attributes, groups, group_attributes, oids)

    origin, grid_shape = grid.layout(lo, hi)
    if oids is None:
        chunks, bins = grid.bin_of(pos)
        part = partition(chunks, bins, all_keys=grid.bins_in_chunk)
    else:
        part = partition(grid.chunk_of(pos), oids)

    handle = open_store(target, mode="w", storage_options=storage_options)
    ex = Executor(handle)
    async with StoreWriter(ex, overwrite=overwrite) as writer:
        level = LevelWriter(writer, 0, origin, grid_shape, codec)
        if attrs:
            empty_group(writer, "0/vertex_attributes")

        def fragments_of(k: int) -> FragmentIndex:
            s = part.chunk_fragments(k)
            return FragmentIndex.from_ranges(part.frag_starts[s], part.frag_counts[s])

        await put_rows(level, part, pos, attrs, fragments_of)
        await level.finish()

        manifest = None
        if uniq is not None:
            manifest = manifest_rows(part.frag_chunk, part.frag_keys, part.chunks, uniq)
        await publish_level(writer, handle.url, grid=grid, shapes=(chunk_shape, bin_shape), bounds=(lo, hi), n=n,
                            has_attributes=bool(attrs),
                            uniq=uniq, manifest=manifest, extras=extras, compression=compression,
                            object_index_layout=object_index_layout)
    return {
        "vertex_count": int(n),
        "chunk_count": int(len(part.chunks)),
        "object_count": 0 if uniq is None else int(len(uniq)),
        "group_count": len(extras.group_rows),
        "bins_per_chunk": list(grid.bins_per_chunk),
        "requests": ex.stats.snapshot(),
    }
