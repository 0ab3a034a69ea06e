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

import os
import tempfile
from collections.abc import AsyncIterable, Iterable, Iterator
from dataclasses import dataclass

import anyio
import numpy as np

from ..errors import InvalidArgumentError, StoreExistsError
from ..format.codecs import CellCodec
from ..format.fragments import FragmentIndex
from ..format.grid import Grid
from ..format.shard import shard_coords
from ..io.executor import Executor
from ..io.store import open_store
from . import inputs
from .engine import StoreWriter, empty_group
from .partition import partition

SPILL_BYTES = 64 << 20  # rows buffered before a sorted run goes to disk
UPLOAD_BYTES = 64 << 20  # encoded cells queued for upload at once

_BATCH_KEYS = {"positions", "attributes", "object_ids"}


def is_batch_stream(obj) -> bool:
    """True when ``obj`` is a stream of batches rather than one positions array.

    Async iterables and one-shot iterators (generators) always are; a list
    or tuple is when its first item is a batch dict or a 2-D array.
    """
    if isinstance(obj, np.ndarray):
        return False
    if isinstance(obj, AsyncIterable) or isinstance(obj, Iterator):
        return True
    if isinstance(obj, (list, tuple)) and obj:
        first = obj[0]
        return isinstance(first, dict) or (isinstance(first, np.ndarray) and first.ndim == 2)
    return False


@dataclass
class _Column:
    """One spill file: fixed-size rows of one array."""

    name: str
    dtype: np.dtype
    row_shape: tuple[int, ...]
    fh: object

    @property
    def row_bytes(self) -> int:
        return self.dtype.itemsize * int(np.prod(self.row_shape, dtype=np.int64))

    def read(self, row0: int, n: int) -> np.ndarray:
        """Rows ``row0 .. row0 + n`` (one reader at a time: the upload pass is sequential)."""
        buf = bytearray(n * self.row_bytes)
        self.fh.seek(row0 * self.row_bytes)
        if self.fh.readinto(buf) != len(buf):
            raise OSError(f"spill file for {self.name!r} ended early")
        return np.frombuffer(buf, dtype=self.dtype).reshape(n, *self.row_shape)


class Spill:
    """Rows spilled to local files in chunk-sorted runs (see the module docstring)."""

    def __init__(self, directory: str, grid: Grid, dtype, bounds, *, implicit_ids: bool,
                 spill_bytes: int = SPILL_BYTES):
        self.ndim = grid.ndim
        self.dir = directory
        self.grid = grid
        self.dtype = np.dtype(dtype)
        self.bounds = bounds
        self.with_ids: bool | None = None  # decided by the first batch
        self.explicit_ids: bool | None = None
        self.implicit_ids = implicit_ids  # groups without ids: the row number is the id
        self.spill_bytes = int(spill_bytes)
        self.attr_schema: dict[str, tuple[np.dtype, tuple[int, ...]]] | None = None
        self.columns: dict[str, _Column] = {}
        self.chunk_ids: dict[tuple[int, ...], int] = {}
        self.n_rows = 0
        self.rows_on_disk = 0
        self.lo = self.hi = None
        self._buf: list[list] = []  # [positions, attributes, object ids, chunk gids] per batch
        self._buf_bytes = 0
        self._runs: list[tuple[int, np.ndarray, np.ndarray]] = []  # (first row, chunk gids, counts)
        self._batches = 0
        self._id_sets: list[np.ndarray] = []  # distinct ids so far, merged as they grow

    # ------------------------------------------------------------- pass 1
    def add(self, batch) -> None:
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
        pos = inputs.positions_array(raw_pos, self.dtype, f"{what}['positions']")
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
                f"{what}['attributes'] {_describe(schema)} differ from the first batch's {_describe(self.attr_schema)}")
        has_ids = raw_ids is not None
        if self.explicit_ids is None:
            self.explicit_ids = has_ids
            self.with_ids = has_ids or self.implicit_ids
        elif has_ids != self.explicit_ids:
            raise InvalidArgumentError(f"{what}: either every batch has 'object_ids' or none does")
        if has_ids:
            oids = inputs.integer_ids(raw_ids, n, f"{what}['object_ids']")
        elif self.implicit_ids:
            oids = np.arange(self.n_rows, self.n_rows + n, dtype=np.int64)
        else:
            oids = None
        if n == 0:
            return
        if has_ids:
            self._id_sets.append(np.unique(oids))
            if len(self._id_sets) >= 16:
                self._id_sets = [np.unique(np.concatenate(self._id_sets))]
        # The chunk each row lands in, by the function the in-memory writer partitions with.
        chunks = self.grid.chunk_of(pos) if self.with_ids else self.grid.bin_of(pos)[0]
        gids = self._chunk_gids(chunks)
        lo, hi = pos.min(axis=0), pos.max(axis=0)
        self.lo = lo if self.lo is None else np.minimum(self.lo, lo)
        self.hi = hi if self.hi is None else np.maximum(self.hi, hi)
        self.n_rows += n
        self._buf.append([pos, attrs, oids, gids])
        self._buf_bytes += (pos.nbytes + gids.nbytes + sum(a.nbytes for a in attrs.values())
                            + (0 if oids is None else oids.nbytes))
        if self._buf_bytes >= self.spill_bytes:
            self.flush()

    def _chunk_gids(self, chunks: np.ndarray) -> np.ndarray:
        """A dense id per distinct chunk, stable across batches (one dict lookup per distinct chunk)."""
        lo = chunks.min(axis=0)
        span = chunks.max(axis=0) - lo + 1
        strides = np.cumprod(np.concatenate(([1], span[::-1][:-1])))[::-1]
        packed = (chunks - lo) @ strides
        uniq, first, inverse = np.unique(packed, return_index=True, return_inverse=True)
        local = np.empty(len(uniq), dtype=np.int64)
        for i, row in enumerate(chunks[first].tolist()):
            local[i] = self.chunk_ids.setdefault(tuple(row), len(self.chunk_ids))
        gids = local[inverse.reshape(-1)]
        return gids.astype(np.int32) if len(self.chunk_ids) < 2**31 else gids

    def _column(self, name: str, dtype: np.dtype, row_shape: tuple[int, ...]) -> _Column:
        col = self.columns.get(name)
        if col is None:
            fh = open(os.path.join(self.dir, f"col{len(self.columns)}.bin"), "w+b")  # noqa: SIM115 - closed in close()
            col = self.columns[name] = _Column(name, np.dtype(dtype), tuple(row_shape), fh)
        return col

    def flush(self) -> None:
        """Write the buffered rows as one run, sorted by chunk (stable: input order kept)."""
        if not self._buf:
            return
        buf, self._buf, self._buf_bytes = self._buf, [], 0
        gids = np.concatenate([b[3] for b in buf])
        order = np.argsort(gids, kind="stable")
        sg = gids[order]
        del gids
        cut = np.flatnonzero(sg[1:] != sg[:-1]) + 1
        run_gids = sg[np.r_[0, cut]].astype(np.int64)
        counts = np.diff(np.r_[0, cut, len(sg)]).astype(np.int64)
        del sg, cut
        for b in buf:
            b[3] = None

        def put(name, i, key=None):
            parts = []
            for b in buf:  # hand each batch's column over, so it is freed once concatenated
                parts.append(b[i] if key is None else b[i].pop(key))
                b[i] = None if key is None else b[i]
            arr = np.concatenate(parts)
            del parts
            col = self._column(name, arr.dtype, arr.shape[1:])
            col.fh.write(np.take(arr, order, axis=0).data)

        put("positions", 0)
        for name in self.attr_schema or {}:
            put(f"attr:{name}", 1, name)
        if self.with_ids:
            put("object_ids", 2)
        self._runs.append((self.rows_on_disk, run_gids, counts))
        self.rows_on_disk += len(order)

    def object_ids(self) -> np.ndarray:
        """Sorted distinct object ids of every row spilled."""
        if self.implicit_ids and not self.explicit_ids:
            return np.arange(self.n_rows, dtype=np.int64)
        return np.unique(np.concatenate(self._id_sets)) if self._id_sets else np.zeros(0, np.int64)

    # ------------------------------------------------------------- pass 2
    def finish(self) -> None:
        """Flush the last run and index every chunk's segments (gid -> [(row, count) per run])."""
        self.flush()
        for col in self.columns.values():
            col.fh.flush()
        if self._runs:
            seg_gid = np.concatenate([g for _, g, _ in self._runs])
            seg_count = np.concatenate([c for *_, c in self._runs])
            seg_row = np.concatenate([r + np.cumsum(c) - c for r, _, c in self._runs])
            order = np.argsort(seg_gid, kind="stable")  # run order kept within a chunk
            self._seg_row, self._seg_count = seg_row[order], seg_count[order]
            self._seg_bounds = np.searchsorted(seg_gid[order], np.arange(len(self.chunk_ids) + 1))
        self._runs.clear()
        coords = np.asarray(list(self.chunk_ids), dtype=np.int64).reshape(-1, self.ndim)
        self.chunk_coords = coords  # indexed by gid

    def read_chunk(self, gid: int) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray | None]:
        """Every row of one chunk, in input order."""
        a, b = int(self._seg_bounds[gid]), int(self._seg_bounds[gid + 1])
        segs = list(zip(self._seg_row[a:b].tolist(), self._seg_count[a:b].tolist()))

        def gather(name):
            col = self.columns[name]
            parts = [col.read(r, c) for r, c in segs]
            return parts[0] if len(parts) == 1 else np.concatenate(parts)

        pos = gather("positions")
        attrs = {name: gather(f"attr:{name}") for name in self.attr_schema or {}}
        oids = gather("object_ids") if self.with_ids else None
        return pos, attrs, oids

    def close(self) -> None:
        for col in self.columns.values():
            col.fh.close()


def _describe(schema: dict) -> str:
    return "{" + ", ".join(f"{k}: {dt}{list(rs) if rs else ''}" for k, (dt, rs) in sorted(schema.items())) + "}"


async def _batches(source):
    """Yield the batches of a sync or async iterable."""
    if isinstance(source, AsyncIterable):
        async for batch in source:
            yield batch
    elif isinstance(source, Iterable):
        for batch in source:
            yield batch
    else:
        raise InvalidArgumentError(f"batches must be an iterable or async iterable, got {type(source).__name__}")


async def write_points_stream(
    target,
    batches,
    *,
    chunk_shape,
    bin_shape=None,
    bounds=None,
    object_attributes=None,
    groups=None,
    group_attributes=None,
    compression=None,
    shard_shape=None,
    dtype="float32",
    overwrite: bool = False,
    object_index_layout: str = "sharded",
    storage_options=None,
    spill_dir=None,
    spill_bytes: int = SPILL_BYTES,
    upload_bytes: int = UPLOAD_BYTES,
) -> dict:
    """Write a point cloud from batches of unknown total size; same store as ``write_points``.

    Each batch is ``{"positions": (n, ndim), "attributes": {name: (n,)|(n, C)},
    "object_ids": (n,)}`` or a bare positions array.  ``spill_dir`` holds the
    temporary files (default: the system temp dir).
    """
    from .object_index import check_layout
    from .points import (
        LevelWriter,
        PointExtras,
        manifest_rows,
        publish_level,
        put_rows,
        shard_tuple,
    )

    if spill_bytes < 1:
        raise InvalidArgumentError(f"spill_bytes must be >= 1, got {spill_bytes}")
    check_layout(object_index_layout)
    grid = Grid.create(chunk_shape, bin_shape)
    ndim = grid.ndim
    codec = CellCodec.for_writing(compression, shard_tuple(shard_shape, ndim))
    if bounds is not None:  # validate the box itself before reading any batch
        inputs.bounds_for(np.zeros((0, ndim)), bounds, ndim)
    handle = open_store(target, mode="w", storage_options=storage_options)
    ex = Executor(handle)
    if not overwrite and await ex.head("zarr.json") is not None:  # fail before spilling, not after
        raise StoreExistsError(f"{handle.url}: a store exists here; pass overwrite=True to replace it")

    with tempfile.TemporaryDirectory(prefix="zvf-stream-", dir=spill_dir) as tmp:
        spill = Spill(tmp, grid, dtype, bounds, implicit_ids=groups is not None,
                      spill_bytes=spill_bytes)
        try:
            async for batch in _batches(batches):
                await anyio.to_thread.run_sync(spill.add, batch)
            await anyio.to_thread.run_sync(spill.finish)
            n = spill.n_rows
            if bounds is None:
                if n == 0:
                    raise InvalidArgumentError("bounds are required when there are no positions")
                lo, hi = spill.lo.astype(np.float64).tolist(), spill.hi.astype(np.float64).tolist()
            else:
                lo, hi = inputs.bounds_for(np.zeros((0, ndim)), bounds, ndim)
            origin, grid_shape = grid.layout(lo, hi)
            attr_schema = spill.attr_schema or {}
            uniq = spill.object_ids() if spill.with_ids else None
            extras = PointExtras.check(uniq, object_attributes, groups, group_attributes,
                                       uniq if spill.explicit_ids else None)
            for name in attr_schema:
                inputs.check_name(name, "attribute")

            # Every chunk in the order the in-memory partition uses (C order of absolute coords);
            # with shards, grouped by shard so each shard is uploaded as soon as it is complete.
            coords = spill.chunk_coords
            c_order = np.lexsort(coords.T[::-1]) if len(coords) else np.zeros(0, np.int64)
            rank = np.empty(len(coords), dtype=np.int64)
            rank[c_order] = np.arange(len(coords))
            visit, shard_of = c_order, None
            if codec.shard is not None and len(coords):
                shard_of = shard_coords(coords - np.asarray(origin), codec.shard).reshape(len(coords), -1)
                visit = np.lexsort((rank, *shard_of.T[::-1]))

            frag_rank, frag_keys = [], []
            async with StoreWriter(ex, overwrite=overwrite, max_inflight_bytes=upload_bytes) as writer:
                level = LevelWriter(writer, 0, origin, grid_shape, codec)
                if attr_schema:
                    empty_group(writer, "0/vertex_attributes")
                for i, gid in enumerate(visit.tolist()):
                    pos, attrs, oids = await anyio.to_thread.run_sync(spill.read_chunk, gid)
                    if oids is None:
                        chunks, bins = grid.bin_of(pos)
                        part = partition(chunks, bins, all_keys=grid.bins_in_chunk)
                    else:
                        part = partition(grid.chunk_of(pos), oids)
                        frag_rank.append(np.full(len(part.frag_keys), rank[gid], dtype=np.int64))
                        frag_keys.append(part.frag_keys)

                    def fragments_of(k: int, part=part) -> FragmentIndex:
                        s = part.chunk_fragments(k)
                        return FragmentIndex.from_ranges(part.frag_starts[s], part.frag_counts[s])

                    await put_rows(level, part, pos, attrs, fragments_of)
                    if shard_of is not None and (i + 1 == len(visit) or
                                                 np.any(shard_of[visit[i + 1]] != shard_of[gid])):
                        shard = tuple(int(s) for s in shard_of[gid])
                        for arr in level.arrays.values():
                            await arr.flush_shard(writer, shard)
                    del pos, attrs, oids, part
                await level.finish()

                manifest = None
                if uniq is not None:
                    # What write_points derives from its Partition, from the per-chunk fragments.
                    fr = np.concatenate(frag_rank) if frag_rank else np.zeros(0, np.int64)
                    fk = np.concatenate(frag_keys) if frag_keys else np.zeros(0, np.int64)
                    by_chunk = np.argsort(fr, kind="stable")  # fragments grouped by chunk, as in a Partition
                    manifest = manifest_rows(fr[by_chunk], fk[by_chunk], coords[c_order], uniq)
                await publish_level(writer, handle.url, grid=grid, shapes=(chunk_shape, bin_shape), bounds=(lo, hi), n=n,
                                    has_attributes=bool(attr_schema), uniq=uniq, manifest=manifest, extras=extras,
                                    compression=compression, object_index_layout=object_index_layout)
        finally:
            spill.close()
    return {
        "vertex_count": int(n),
        "chunk_count": int(len(coords)),
        "object_count": 0 if uniq is None else int(len(uniq)),
        "group_count": len(extras.group_rows),
        "bins_per_chunk": list(grid.bins_per_chunk),
        "requests": ex.stats.snapshot(),
    }


