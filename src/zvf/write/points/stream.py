"""Streaming point ingest: batches of unknown total size in bounded memory.

``write_points(target, batches, ...)`` with an iterable or async iterable of
batches lands here.  Two passes:

1. **Spill.**  Each batch is checked, cast and placed on the grid (the same
   chunk function the in-memory writer partitions by).  Rows are buffered
   until ``spill_bytes``, then stably sorted by chunk and appended as one
   *run* to a temporary file per column (positions, each attribute, object
   ids).  A run records where every chunk's rows start, so the column
   files stay few however many chunks there are.  Bounds, when not given,
   are the running min/max.
2. **Upload.**  Chunk by chunk, a chunk's rows are read back from every run
   in run order -- input order within the chunk, exactly what a stable sort
   of the concatenated arrays gives -- and go through the in-memory writer's
   own ``partition`` and ``put_rows``.  The store is therefore byte for byte
   the one ``write_points`` writes from the concatenated arrays.

Memory is one spill buffer, one chunk and the writer's upload budget; the
temporary directory is removed at the end, also on failure.  Nothing is
visible in the store before the root document (``StoreWriter``).
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeGuard, Unpack

import anyio
import numpy as np

from ...config import tuning
from ...errors import InvalidArgumentError
from ...format.codecs import CellCodec
from ...format.fragments import FragmentIndex
from ...format.grid import extremes
from ...format.layout import LevelLayout
from .. import inputs, layout
from ..fragment_attributes import FragmentAttributes
from ..level import level0, put_rows, resolve_shards, shard_tuple
from ..partition import Partition, partition
from ..spill import ChunkIds, DistinctIds, RunSpill, batches_of, describe, open_new, shard_done
from ..store_writer import StoreWriter
from ..types import WriteSummary
from .level import PointExtras, manifest_rows, publish_level

if TYPE_CHECKING:
    from ...io.store import Target
    from ..types import Bounds, FragmentColumns, PointBatch, PointBatches, Shape, SpillDir, WriteOptions


_BATCH_KEYS = {"positions", "attributes", "object_ids"}


def is_batch_stream(obj: object) -> TypeGuard[Iterable[Any] | AsyncIterable[Any]]:
    """True when ``obj`` is a stream of batches rather than one positions array.

    Async iterables and one-shot iterators (generators) always are; a list
    or tuple is when its first item is a batch dict or a 2-D array.
    """
    if isinstance(obj, np.ndarray):
        return False
    if isinstance(obj, (AsyncIterable, Iterator)):
        return True
    if isinstance(obj, (list, tuple)) and obj:
        first = obj[0]
        return isinstance(first, dict) or (isinstance(first, np.ndarray) and first.ndim == 2)
    return False


class Spill:
    """A point cloud's rows spilled to local files in chunk-sorted runs (see the module docstring)."""

    def __init__(self, directory: str, level_layout: LevelLayout, dtype: np.dtype | None, bounds: Bounds | None, *,
                 implicit_ids: bool, spill_bytes: int | None = None):
        self.ndim = level_layout.ndim
        self.layout = level_layout  # its placement rule is the first batch's (by bin until then)
        self.dtype = dtype  # None: the first batch's float dtype, then every batch is cast to it
        self.explicit_dtype = dtype is not None
        self.bounds = bounds
        self.with_ids: bool | None = None  # decided by the first batch
        self.explicit_ids: bool | None = None
        self.implicit_ids = implicit_ids  # groups without ids: the row number is the id
        self.attr_schema: dict[str, tuple[np.dtype, tuple[int, ...]]] | None = None
        self.chunks = ChunkIds(self.ndim)
        self.rows = RunSpill(directory, "col", spill_bytes)
        self.n_rows = 0
        self.lo: np.ndarray | None = None
        self.hi: np.ndarray | None = None
        self._batches = 0
        self._ids = DistinctIds()

    # ------------------------------------------------------------- pass 1
    def add(self, batch: PointBatch) -> None:
        """Check one batch, place it on the grid and buffer it (spilling a run when full)."""
        b = self._batches
        self._batches += 1
        what = f"batches[{b}]"
        if isinstance(batch, dict):
            unknown = set(batch) - _BATCH_KEYS
            if unknown or "positions" not in batch:
                raise InvalidArgumentError(
                    f"{what} must be a positions array or a dict with 'positions' and optional "
                    f"'attributes', 'object_ids' (got keys {sorted(batch)})")
            raw_pos, raw_attrs, raw_ids = batch["positions"], batch.get("attributes"), batch.get("object_ids")
        else:
            raw_pos, raw_attrs, raw_ids = batch, None, None
        name = f"{what}['positions']"
        raw_pos = inputs.as_numeric(raw_pos, name)
        pos = inputs.positions_array(raw_pos, inputs.batch_dtype(raw_pos.dtype, self.dtype, self.explicit_dtype, name),
                                     name)
        if len(pos):
            self.dtype = pos.dtype
        n, ndim = pos.shape
        if ndim != self.ndim:
            raise InvalidArgumentError(f"{what}['positions'] is {ndim}-D but chunk_shape has {self.ndim} values")
        if self.bounds is not None:
            try:
                inputs.bounds_for(pos, self.bounds, ndim)
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"{what}: {exc}") from None
        attrs = inputs.row_attributes(raw_attrs, n, f"{what}['attributes']")
        schema = {k: (v.dtype, v.shape[1:]) for k, v in attrs.items()}
        if self.attr_schema is None:
            self.attr_schema = schema
        elif schema != self.attr_schema:
            raise InvalidArgumentError(
                f"{what}['attributes'] {describe(schema)} differ from the first batch's {describe(self.attr_schema)}")
        has_ids = raw_ids is not None
        if self.explicit_ids is None:
            self.explicit_ids = has_ids
            self.with_ids = has_ids or self.implicit_ids
            self.layout = self.layout.filed(with_ids=self.with_ids)
        elif has_ids != self.explicit_ids:
            raise InvalidArgumentError(f"{what}: either every batch has 'object_ids' or none does")
        if raw_ids is not None:  # has_ids
            oids = inputs.integer_ids(raw_ids, n, f"{what}['object_ids']")
        elif self.implicit_ids:
            oids = np.arange(self.n_rows, self.n_rows + n, dtype=np.int64)
        else:
            oids = None
        if n == 0:
            return
        if has_ids and oids is not None:  # oids is set whenever has_ids
            self._ids.add(oids)
        # The chunk each row lands in, by the function the in-memory writer partitions with.
        gids = self.chunks.of(self.layout.chunk_of(pos))
        lo, hi = extremes(pos)
        self.lo = lo if self.lo is None else np.minimum(self.lo, lo)
        self.hi = hi if self.hi is None else np.maximum(self.hi, hi)
        self.n_rows += n
        cols = {"positions": pos, **{f"attr:{k}": v for k, v in attrs.items()}}
        if oids is not None:
            cols["object_ids"] = oids
        self.rows.push(gids, cols)

    def object_ids(self) -> np.ndarray:
        """Sorted distinct object ids of every row spilled."""
        if self.implicit_ids and not self.explicit_ids:
            return np.arange(self.n_rows, dtype=np.int64)
        return self._ids.result()

    # ------------------------------------------------------------- pass 2
    def finish(self) -> None:
        self.rows.finish(len(self.chunks))
        self.chunk_coords = self.chunks.coords()  # indexed by gid

    def read_chunk(self, gid: int) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray | None]:
        """Every row of one chunk, in input order."""
        cols = self.rows.read(gid)
        attrs = {name: cols[f"attr:{name}"] for name in self.attr_schema or {}}
        return cols["positions"], attrs, cols.get("object_ids")

    def close(self) -> None:
        self.rows.close()


async def write_points_stream(target: Target, batches: PointBatches, *, chunk_shape: Shape, spill_dir: SpillDir = None,
                              spill_bytes: int | None = None, upload_bytes: int | None = None,
                              fragment_attributes: FragmentColumns | None = None,
                              **options: Unpack[WriteOptions]) -> WriteSummary:
    """Write a point cloud from batches of unknown total size; same store as ``write_points``.

    Each batch is ``{"positions": (n, ndim), "attributes": {name: (n,)|(n, C)},
    "object_ids": (n,)}`` or a bare positions array.  ``spill_dir`` holds the
    temporary files (default: the system temp dir).  Without ``dtype`` the
    first batch's float dtype is stored (see :func:`zvf.write.inputs.batch_dtype`).  ``fragment_attributes``
    as for ``write_points`` (held in memory: one row per fragment of the chunks given).  ``spill_bytes``,
    ``upload_bytes``: default, the :mod:`zvf.config` settings of those names.
    """
    spill_bytes = tuning().spill_bytes if spill_bytes is None else spill_bytes
    upload_bytes = tuning().upload_bytes if upload_bytes is None else upload_bytes
    cfg = inputs.streamed_config(chunk_shape, options, spill_bytes)
    assert not isinstance(chunk_shape, str)  # streamed_config refused "auto"
    unfiled = LevelLayout.for_writing(chunk_shape, cfg.bin_shape, with_ids=False)
    ndim = unfiled.ndim
    frag_attrs = FragmentAttributes(fragment_attributes, ndim)
    codec = CellCodec.for_writing(cfg.compression, shard_tuple(cfg.shard_shape, ndim))
    bounds, groups = cfg.bounds, cfg.groups
    if bounds is not None:  # validate the box itself before reading any batch
        inputs.bounds_for(np.zeros((0, ndim)), bounds, ndim)
    handle, ex = await open_new(target, cfg)

    with tempfile.TemporaryDirectory(prefix="zvf-stream-", dir=spill_dir) as tmp:
        spill = Spill(tmp, unfiled, cfg.dtype, bounds, implicit_ids=groups is not None, spill_bytes=spill_bytes)
        try:
            async for batch in batches_of(batches):
                await anyio.to_thread.run_sync(spill.add, batch)
            await anyio.to_thread.run_sync(spill.finish)
            n = spill.n_rows
            if bounds is None:
                if n == 0:
                    raise InvalidArgumentError("bounds are required when there are no positions")
                assert spill.lo is not None and spill.hi is not None  # set by the first of the n > 0 rows
                lo, hi = spill.lo.astype(np.float64).tolist(), spill.hi.astype(np.float64).tolist()
            else:
                lo, hi = inputs.bounds_for(np.zeros((0, ndim)), bounds, ndim)
            layout.check_cells(n, len(spill.chunks), chunk_shape, lo, hi)  # after the spill, before any upload
            level_layout = spill.layout
            origin, grid_shape = level_layout.extent(lo, hi)
            codec = resolve_shards(codec, cfg.shard_shape, grid_shape, n * ndim * np.dtype(spill.dtype).itemsize)
            attr_schema = spill.attr_schema or {}
            uniq = spill.object_ids() if spill.with_ids else None
            extras = PointExtras.check(uniq, cfg.object_attributes, groups, cfg.group_attributes,
                                       uniq if spill.explicit_ids else None)
            for name in attr_schema:
                inputs.check_name(name, "attribute")

            # Every chunk in the order the in-memory partition uses (C order of absolute coords);
            # with shards, grouped by shard so each shard is uploaded as soon as it is complete.
            coords = spill.chunk_coords
            visit, rank, shard_of = spill.chunks.visit_order(origin, codec.shard)

            frag_rank, frag_keys = [], []
            async with StoreWriter.for_config(ex, cfg, upload_bytes) as writer:
                level = level0(writer, origin, grid_shape, codec, bool(attr_schema))
                for i, gid in enumerate(visit.tolist()):
                    pos, attrs, oids = await anyio.to_thread.run_sync(spill.read_chunk, gid)
                    if oids is None:
                        chunks, bins = level_layout.bin_of(pos)
                        part = partition(chunks, bins, all_keys=level_layout.bins_in_chunk)
                    else:
                        part = partition(level_layout.chunk_of(pos), oids)
                        frag_rank.append(np.full(len(part.frag_keys), rank[gid], dtype=np.int64))
                        frag_keys.append(part.frag_keys)

                    def fragments_of(k: int, part: Partition = part) -> FragmentIndex:
                        s = part.chunk_fragments(k)
                        return FragmentIndex.from_ranges(part.frag_starts[s], part.frag_counts[s])

                    await put_rows(level, part, pos, attrs, fragments_of,
                                   seekable=oids is None and cfg.object_index_layout != "reference")
                    await frag_attrs.put_partition(level, part)
                    shard = shard_done(visit, shard_of, i)
                    if shard is not None:
                        for arr in level.arrays.values():
                            await arr.flush_shard(writer, shard)
                    del pos, attrs, oids, part
                if not len(visit):  # no rows at all: declare the arrays anyway, as write_points does
                    dt = inputs.position_dtype(np.dtype(np.float32), spill.dtype)
                    await put_rows(level, partition(np.zeros((0, ndim), np.int64), np.zeros(0, np.int64)),
                                   np.zeros((0, ndim), dt),
                                   {k: np.zeros((0, *rs), adt) for k, (adt, rs) in attr_schema.items()}, None)
                await level.finish()

                manifest = None
                if uniq is not None:
                    # What write_points derives from its Partition, from the per-chunk fragments.
                    fr = np.concatenate(frag_rank) if frag_rank else np.zeros(0, np.int64)
                    fk = np.concatenate(frag_keys) if frag_keys else np.zeros(0, np.int64)
                    by_chunk = np.argsort(fr, kind="stable")  # fragments grouped by chunk, as in a Partition
                    manifest = manifest_rows(fr[by_chunk], fk[by_chunk], coords[np.argsort(rank)], uniq)
                await publish_level(writer, handle.url, ndim=ndim, shapes=(chunk_shape, cfg.bin_shape),
                                    bounds=(lo, hi), n=n, has_attributes=bool(attr_schema), uniq=uniq,
                                    manifest=manifest, extras=extras, compression=cfg.compression,
                                    object_index_layout=cfg.object_index_layout, fragment_attributes=frag_attrs)
        finally:
            spill.close()
    return WriteSummary.of(
        writer, "point_cloud", vertex_count=int(n), chunk_count=len(coords),
        object_count=0 if uniq is None else len(uniq), group_count=len(extras.group_rows),
        bins_per_chunk=list(unfiled.bins_per_chunk))


