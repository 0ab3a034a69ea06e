"""Point-cloud writer: the same bytes zarr-vectors 0.9.2's ``write_points`` produces.

Without object ids every chunk holds one range fragment per bin (empty bins
included) with rows sorted by bin; with object ids one fragment per
(object, chunk), rows grouped by ascending object id, and an object index.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Unpack, cast

import numpy as np

from ...errors import InvalidArgumentError
from ...format.codecs import CellCodec
from ...format.fragments import FragmentIndex
from ...format.layout import LevelLayout
from ...io.executor import Executor
from ...io.store import open_store
from .. import inputs, layout
from ..fragment_attributes import FragmentAttributes
from ..level import level0, put_rows, resolve_shards, shard_tuple
from ..partition import partition_codes
from ..store_writer import StoreWriter
from ..types import WriteSummary
from .categories import CategoryAxis
from .level import PointExtras, manifest_rows, publish_level
from .stream import is_batch_stream, write_points_stream

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from ...io.store import Target
    from ..types import Columns, FragmentColumns, PointBatches, Shape, WriteOptions


@inputs.keywords_first(inputs.WRITE_OPTIONS | inputs.STREAM_OPTIONS)
async def write_points(
    target: Target,
    positions: ArrayLike | PointBatches,
    *,
    chunk_shape: Shape,
    attributes: Columns | None = None,
    object_ids: ArrayLike | None = None,
    chunk_by_attribute: str | None = None,
    fragment_attributes: FragmentColumns | None = None,
    **options: Unpack[WriteOptions],
) -> WriteSummary:
    """Write a point cloud to ``target``; returns a summary (counts, requests, bytes).

    ``options`` are the writers' common keywords (:class:`zvf.WriteOptions`:
    ``bin_shape``, ``bounds``, ``compression``, ``dtype``, ``overwrite``...).
    ``dtype`` None stores positions in their own float dtype (float64 stays
    float64); 0.9.2 defaults to float32, so pass ``dtype="float32"`` for its bytes.
    ``object_index_layout="reference"`` writes manifests exactly as 0.9.2 does;
    the default ("sharded") lets a reader fetch one object's manifest alone.

    ``positions`` may also be an iterable or async iterable of batches (see
    ``zvf.write.points.stream``): streamed through local spill files, same bytes.

    ``chunk_by_attribute`` names an integer attribute whose values become a leading
    chunk axis (0.9.2's layout, see ``zvf.write.points.categories``; in-memory input only).

    ``fragment_attributes``: ``{name: {chunk coords: (F_c,) / (F_c, C)}}``, one row per
    fragment of the chunk (see ``zvf.write.fragment_attributes``): without object ids, one
    per bin of the chunk in bin order; with them, one per object in the chunk by ascending
    id.  Read back with ``ds.fragment_attribute(name)``.
    """
    if is_batch_stream(positions):
        if chunk_by_attribute is not None:
            raise InvalidArgumentError("chunk_by_attribute needs in-memory input, not batches")
        if attributes is not None or object_ids is not None:
            raise InvalidArgumentError("with batches, pass attributes and object_ids inside each batch")
        return await write_points_stream(target, positions, chunk_shape=chunk_shape,
                                         fragment_attributes=fragment_attributes, **options)
    if fragment_attributes is not None and chunk_by_attribute is not None:
        raise InvalidArgumentError("fragment_attributes: not supported with chunk_by_attribute")
    cfg = inputs.write_config(chunk_shape, options)
    # is_batch_stream is a TypeGuard: it narrows the stream branch above, not this one
    pos = inputs.positions_array(cast("ArrayLike", positions), cfg.dtype)
    n, ndim = pos.shape
    lo, hi = inputs.bounds_for(pos, cfg.bounds, ndim)
    auto = isinstance(chunk_shape, str) or isinstance(cfg.bin_shape, str)  # sampled for where the points are
    chunk_shape, bin_shape = layout.resolve(chunk_shape, cfg.bin_shape, lo, hi, n,
                                            points=layout.PointSample.of(pos) if auto else None)
    level_layout = LevelLayout.for_writing(chunk_shape, bin_shape, with_ids=object_ids is not None, ndim=ndim)
    frag_attrs = FragmentAttributes(fragment_attributes, ndim)
    attrs = inputs.row_attributes(attributes, n, "attributes")
    oids = None if object_ids is None else inputs.integer_ids(object_ids, n, "object_ids")
    axis = None if chunk_by_attribute is None else CategoryAxis.take(attrs, chunk_by_attribute, n)
    shard = shard_tuple(cfg.shard_shape, ndim) if axis is None else axis.shard(cfg.shard_shape, ndim)
    codec = CellCodec.for_writing(cfg.compression, shard)
    if (cfg.groups is not None or axis is not None) and oids is None:
        oids = np.arange(n, dtype=np.int64)  # 0.9.2: with groups but no ids every vertex is an object
    uniq = None if oids is None else np.unique(oids)
    level_layout = level_layout.filed(with_ids=oids is not None)  # groups or a category axis give ids
    extras = PointExtras.check(uniq, cfg.object_attributes, cfg.groups, cfg.group_attributes, oids)

    origin, grid_shape = level_layout.extent(lo, hi)
    cells = level_layout.cell_codes(pos)
    if axis is None:
        part = partition_codes(cells, oids, all_keys=oids is None)
    else:  # the category axis leads every cell's coordinates
        assert oids is not None  # a category axis gives every row an id
        part = axis.partition(cells, oids)
        origin, grid_shape = axis.grid(origin, grid_shape)
    codec = resolve_shards(codec, cfg.shard_shape, grid_shape, pos.nbytes)
    layout.check_cells(n, len(part.chunks), chunk_shape, lo, hi)

    handle = open_store(target, mode="w", storage_options=cfg.storage_options)
    ex = Executor(handle)
    async with StoreWriter.for_config(ex, cfg) as writer:
        level = level0(writer, origin, grid_shape, codec, bool(attrs))

        def fragments_of(k: int) -> FragmentIndex:
            s = part.chunk_fragments(k)
            return FragmentIndex.from_ranges(part.frag_starts[s], part.frag_counts[s])

        await put_rows(level, part, pos, attrs, fragments_of,
                       seekable=oids is None and cfg.object_index_layout != "reference")
        await frag_attrs.put_partition(level, part)
        await level.finish()

        manifest = None
        if uniq is not None:
            manifest = manifest_rows(part.frag_chunk, part.frag_keys, part.chunks, uniq)
        common = dict(ndim=ndim, shapes=(chunk_shape, bin_shape), bounds=(lo, hi), n=n, has_attributes=bool(attrs),
                      uniq=uniq, manifest=manifest, extras=extras, compression=cfg.compression,
                      object_index_layout=cfg.object_index_layout)
        if axis is None:
            await publish_level(writer, handle.url, **common, fragment_attributes=frag_attrs)
        else:
            await axis.publish(writer, handle.url, **common)
    return WriteSummary.of(
        writer, "point_cloud", vertex_count=int(n), chunk_count=len(part.chunks),
        object_count=0 if uniq is None else len(uniq), group_count=len(extras.group_rows),
        bins_per_chunk=list(level_layout.bins_per_chunk))
