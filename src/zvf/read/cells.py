"""Fetch and decode the cells of one Zarr array, sharded or not.

A ``CellArray`` turns "the payloads of these chunks" into the fewest
requests the layout allows: plain cells are one GET each (missing = empty
chunk); sharded cells read the shard index once by suffix range (cached)
and then fetch only the inner chunks asked for, coalesced per shard.
Uncompressed plain cells can also be read partially, by row span.
"""

from __future__ import annotations

import contextlib
import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeAlias, cast

import anyio
import numpy as np
from numpy.typing import NDArray

from ..config import tuning
from ..errors import FormatError, MissingDataError, SizeLimitError
from ..format.codecs import CellCodec, decoded_limit
from ..format.keys import ChunkKeyEncoding, format_chunk_id
from ..format.metadata import ArrayMeta
from ..format.seekable import SeekTable, decode_frames, seekable_codec
from ..format.shard import EMPTY, decode_shard_index, index_nbytes
from ..format.vlen import VLEN_HEADER
from ..io.executor import Executor
from ..io.plan import ByteRange, bridging_gap, choose_fetch
from .rowops import expand_ranges, unique_ints

# A cell's payload is one vlen item, whose length prefix is a u32: no cell holds more bytes.
MAX_CELL_BYTES = (1 << 32) - 1
# Channels assumed, to bound its cells, for a vertex attribute that declares none (0.9.2 writes the
# multi-channel rows of polylines and graphs with ``row_shape: []``).
UNDECLARED_CHANNELS = 256
# Executor cache of whole shards a level sweep goes on reading (see ``payloads(keep_shards=True)``).
SHARD_CACHE = "shard"
# Executor cache of decoded cells: concurrent and repeated box queries of a service decode each once
# (and of the decoded frames of seekable cells, one entry per frame).
DECODED_CACHE = "cell"
# Executor cache of seekable cells' seek tables (an empty table: the cell has none).
SEEK_CACHE = "seek_table"

#: An absolute (or grid) chunk coordinate: a tuple, a list or a row of a coordinate array.
ChunkCoords: TypeAlias = Sequence[int] | NDArray[np.integer[Any]]
#: Several chunk coordinates: a sequence of them or an (N, ndim) array.
ChunkList: TypeAlias = Sequence[Sequence[int]] | NDArray[np.integer[Any]]
#: Bytes of a seekable cell's end read for its seek table, given the cell's size over a typical cell's (None:
#: unknown, a plain cell).
SeekGuess: TypeAlias = Callable[[float | None], int]
#: A shard read whole: (its bytes, inner chunk offsets, inner chunk sizes).
WholeShard: TypeAlias = tuple[bytes | memoryview, NDArray[np.uint64], NDArray[np.uint64]]


@dataclass
class CellArray:
    """One array's cells: key layout, codec and sharding, bound to an executor."""

    executor: Executor
    path: str  # array path relative to the store root, e.g. "0/vertices"
    meta: ArrayMeta
    rows: int | None = None  # the level's vertex_count: it bounds the cells of arrays holding a row per vertex
    codec: CellCodec = field(init=False)
    keys: ChunkKeyEncoding = field(init=False)
    origin: np.ndarray = field(init=False)
    max_payload: int | None = field(init=False)  # payload bytes one read may decode from every cell together

    def __post_init__(self) -> None:
        key = f"{self.path}/zarr.json"
        self.codec = CellCodec.from_array_metadata(self.meta.raw, key=key)
        self.keys = ChunkKeyEncoding.from_metadata(self.meta.raw)
        self.origin = np.asarray(self.meta.grid_origin, dtype=np.int64)
        self.max_payload = self._payload_bound()

    # ------------------------------------------------------------- bounds
    def _row_bytes(self) -> int | None:
        """Bytes of one row of an array holding a row per vertex (vertex attributes that declare no channels:
        :data:`UNDECLARED_CHANNELS`); None for other arrays and encoded (Draco) vertices."""
        attrs = self.meta.attributes
        kind = attrs.get("zv_array")
        if kind not in ("vertices", "attribute") or attrs.get("encoding", "raw") != "raw" or not self.meta.is_vlen:
            return None
        itemsize: int = np.dtype(attrs.get("dtype", "float32")).itemsize
        if kind == "vertices":
            return itemsize * len(self.meta.shape)  # rank: the spatial axes (and a category axis, if any)
        names = attrs.get("channel_names")
        width = int(np.prod(attrs["row_shape"])) if attrs.get("row_shape") else (
            len(names) if isinstance(names, list) and names else UNDECLARED_CHANNELS)
        return itemsize * width

    def _payload_bound(self) -> int | None:
        """What a read may decode from this array, every cell together: the level's ``vertex_count`` rows for
        an array holding a row per vertex; None (each cell to the codec's own limit) for the others.  A
        ``vertex_count`` larger than the cells ``vertices`` lists could hold is refused here, at open."""
        row = self._row_bytes()
        if self.rows is None or row is None:
            return None
        if self.meta.attributes.get("zv_array") == "vertices" and "nonempty_chunks" in self.meta.attributes:
            cells, most = len(self.meta.nonempty_chunk_array), MAX_CELL_BYTES // row
            if self.rows > cells * most:
                raise FormatError(
                    f"{self.path.split('/', 1)[0]}/zarr.json: vertex_count {self.rows} is more rows than the "
                    f"{cells} cells {self.path} lists can hold ({most} rows of {row} bytes each at most)")
        return self.rows * row

    def _decoder(self) -> Callable[[bytes | memoryview, str], memoryview]:
        """A decoder for the cells of one read: each cell is decoded with what is left of
        :attr:`max_payload` as its limit, so no cell is inflated past what the level declares (a few KB of
        zstd can claim gigabytes); the limit is checked against the codecs' headers before inflating."""
        left = self.max_payload

        def decode(raw: bytes | memoryview, key: str) -> memoryview:
            nonlocal left
            most = decoded_limit(None)
            limit = most if left is None else min(left, most)
            try:
                out = self.codec.decode_view(raw, key=key, max_size=limit + VLEN_HEADER)
            except SizeLimitError as e:
                if left is None:
                    raise
                level = self.path.split("/", 1)[0]
                raise SizeLimitError(
                    f"{e}: more than {self.path} holds by {level}/zarr.json, whose vertex_count of {self.rows} "
                    f"rows allows {self.max_payload} bytes in all its cells together") from None
            if left is not None:
                left -= len(out)
            return out

        return decode

    # ------------------------------------------------------------- keys
    def cell_coords(self, coords: ChunkCoords) -> tuple[int, ...]:
        """Zarr grid position of an absolute chunk coordinate."""
        rel = np.asarray(coords, dtype=np.int64) - self.origin
        return tuple(int(c) for c in rel)

    def key_of(self, grid_coords: tuple[int, ...]) -> str:
        return self.keys.key(self.path, grid_coords)

    def keys_of(self, chunks: ChunkList) -> list[str]:
        """Key of each absolute chunk coordinate in ``chunks`` (a sequence of them)."""
        if not len(chunks):
            return []
        return self.keys.keys(self.path, np.asarray(chunks, dtype=np.int64).reshape(len(chunks), -1) - self.origin)

    @property
    def partial_rows_ok(self) -> bool:
        """Rows can be range-read straight from storage: no compression, no shards."""
        return not self.codec.compressors and self.codec.shard is None

    # ------------------------------------------------------------- reads
    async def payloads(self, chunks: ChunkList, *, keep_shards: bool = False) -> list[bytes | memoryview | None]:
        """Decoded payload of each absolute chunk (None for an absent cell).

        ``keep_shards``: the caller will go on to read the rest of these shards (a sweep of the level), so
        each comes whole in one GET and stays cached for the next calls.
        """
        grid, holders = self._cells_of(chunks)
        if keep_shards or not self.codec.compressors:  # a sweep reads each cell once; raw cells decode for free
            return await self._fetch(grid, holders, keep_shards)
        # (namespace, the object holding the cell, the cell): the executor's own puts invalidate by object key
        wanted = [(DECODED_CACHE, k, g) for k, g in zip(holders, grid)]

        async def fetch(missing: list[tuple[str, str, tuple[int, ...]]]) -> list[bytes | memoryview | None]:
            got = await self._fetch([m[2] for m in missing], [m[1] for m in missing], False)
            return [p if p is None or isinstance(p, bytes) or p.readonly else p.toreadonly() for p in got]

        return await self.executor.cached_many(DECODED_CACHE, wanted, fetch, _payload_bytes)

    def _cells_of(self, chunks: ChunkList) -> tuple[list[tuple[int, ...]], list[str]]:
        """Grid position of each absolute chunk and the key of the object holding its cell (:meth:`cell_coords`
        and :meth:`object_key` for many chunks in a few numpy steps: a whole-level read asks for hundreds)."""
        if not len(chunks):
            return [], []
        grid = np.asarray(chunks, dtype=np.int64).reshape(len(chunks), -1) - self.origin
        per = self.codec.shard
        holders = grid if per is None else grid // np.asarray(per, dtype=np.int64)
        return list(map(tuple, grid.tolist())), self.keys.keys(self.path, holders)

    async def _fetch(self, grid: list[tuple[int, ...]], holders: list[str], keep_shards: bool
                     ) -> list[bytes | memoryview | None]:
        """:meth:`payloads` of cells given by grid position and their holding objects' keys (:meth:`_cells_of`),
        read and decoded, without the decoded-cell cache."""
        if self.codec.shard is None:
            raws = await self.executor.get_many(holders)  # a plain cell is its own object
            for k, raw, g in zip(holders, raws, grid):
                if raw is None:
                    await self._absent(k, np.asarray(g, dtype=np.int64) + self.origin)
            present = [j for j, raw in enumerate(raws) if raw is not None]
            decoded = await self._decode_all([(cast("bytes | memoryview", raws[j]), holders[j]) for j in present])
            out: list[bytes | memoryview | None] = [None] * len(raws)
            for j, payload in zip(present, decoded):
                out[j] = payload
            return out
        return await self._sharded(grid, keep_shards)

    @cached_property
    def _listed(self) -> frozenset[tuple[int, ...]]:
        """The absolute chunks the array's ``nonempty_chunks`` says hold data (empty when it lists none)."""
        if "nonempty_chunks" not in self.meta.attributes:
            return frozenset()
        return frozenset(map(tuple, self.meta.nonempty_chunk_array.tolist()))

    async def _absent(self, key: str, chunk: ChunkCoords) -> None:
        """A cell is absent: an empty chunk, unless the array lists it as holding data -- then the store
        changed under a reader whose version is gone (StaleDatasetError) or is damaged (an error naming
        the key), never "empty"."""
        listed = self._listed
        if not listed:
            return
        cell = tuple(int(c) for c in chunk)
        if cell not in listed:
            return
        what = f"{self.path} lists chunk {format_chunk_id(cell)} in nonempty_chunks"
        pin = self.executor.pin
        if pin is not None:
            raise await pin.missing(key, what)
        raise MissingDataError(f"{key}: missing, but {what}")

    async def payload(self, chunk: ChunkCoords) -> bytes | memoryview | None:
        """Decoded payload of one absolute chunk: one GET of a plain cell, no gather around it."""
        grid = self.cell_coords(chunk)
        if self.codec.shard is not None:
            return (await self._sharded([grid]))[0]
        key = self.key_of(grid)
        raw = await self.executor.get(key)
        if raw is None:
            await self._absent(key, chunk)
            return None
        return self._decoder()(raw, key)

    async def items(self, grid_coords: tuple[int, ...]) -> list[memoryview] | None:
        """All items of one multi-item cell (1-D vlen arrays such as manifests)."""
        key = self.key_of(grid_coords)
        raw = await self.executor.get(key, cache="manifest")
        if raw is None:
            return None
        return self.codec.decode_items(raw, key=key)

    @property
    def seekable(self) -> bool:
        """Cells may be seekable zstd (:mod:`zvf.format.seekable`): an array holding a row per vertex whose
        codecs are vlen-bytes then zstd alone."""
        return self._row_bytes() is not None and seekable_codec(self.codec)

    def object_key(self, grid: tuple[int, ...]) -> str:
        """Key of the object holding cell ``grid`` (its shard, when sharded)."""
        per = self.codec.shard
        return self.key_of(grid if per is None else tuple(a // b for a, b in zip(grid, per)))

    def decoded_cached(self, chunk: ChunkCoords) -> bool:
        """Whether ``chunk``'s decoded cell is in the executor's cache (:meth:`payloads` makes no request)."""
        g = self.cell_coords(chunk)
        return (DECODED_CACHE, self.object_key(g), g) in self.executor.cache(DECODED_CACHE)

    def seek_cached(self, chunk: ChunkCoords) -> bool:
        """Whether the seek table of ``chunk``'s cell is in the executor's cache."""
        g = self.cell_coords(chunk)
        return ("seek", self.object_key(g), g) in self.executor.cache(SEEK_CACHE)

    async def seek_tables(self, chunks: ChunkList, guess: SeekGuess, max_frames: int) -> list[SeekTable]:
        """Seek table (and bounds) of each absolute chunk's cell, through the executor's cache: one read of the
        cell's last ``guess(share)`` bytes (a suffix of a plain cell, ``share`` None; of a sharded inner chunk,
        the range ending where the shard index says it ends, ``share`` its size over its shard's mean cell), a
        second for a table longer than that.  A cell without one (written before seekable cells, or by another
        writer) or absent gets an empty table: it is read whole.  ``max_frames``: the most entries a table may
        list."""
        grid, holders = self._cells_of(chunks)

        async def fetch(missing: list[tuple[int, ...]]) -> list[SeekTable]:
            return await self._read_seek_tables(missing, guess, max_frames)

        return await self.executor.cached_many(SEEK_CACHE, [("seek", k, g) for k, g in zip(holders, grid)],
                                               lambda keys: fetch([k[2] for k in keys]),
                                               lambda t: t.memory_nbytes)

    async def _read_seek_tables(self, grid: list[tuple[int, ...]], guess: SeekGuess, max_frames: int
                                ) -> list[SeekTable]:
        ends: list[tuple[str, int | None, int | None]] = []  # (object key, cell start, cell end): None plain
        sizes: list[int] = []  # bytes of each cell's end read first
        if self.codec.shard is None:
            ends = [(self.key_of(g), None, None) for g in grid]
            sizes = [guess(None)] * len(grid)
        else:
            by_shard = group_by_shard(grid, self._inner_per_shard())
            keys = {s: self.key_of(s) for s in by_shard}
            indexes = await self.executor.gather([self._shard_index(keys[s]) for s in by_shard])
            ends = [("", None, None)] * len(grid)
            sizes = [0] * len(grid)
            for (shard, members), index in zip(by_shard.items(), indexes):
                if index is None:
                    ends = [("", -1, -1) if i in members else e for i, e in enumerate(ends)]
                    continue
                stored = index[1][index[0] != EMPTY]
                mean = float(stored.mean()) if len(stored) else 1.0
                for i, start, n in zip(members, *self._spans(grid, members, shard, *index)):
                    ends[i] = (keys[shard], start, start + n) if start >= 0 else ("", -1, -1)
                    sizes[i] = guess(n / max(mean, 1.0))
        empty = SeekTable(np.zeros(0, np.int64), np.zeros(0, np.int64))

        async def one(key: str, start: int | None, end: int | None, size: int) -> SeekTable:
            if start is not None and start < 0:
                return empty  # absent inner chunk: the whole-cell read reports it
            if start is None:
                tail = await self.executor.get_suffix(key, size)
            else:
                assert end is not None
                tail = await self.executor.get_range(key, max(start, end - size), end)
            if tail is None:
                return empty
            where = key if start is None else f"{key}[{start}:{end}]"
            whole = len(tail) < size if start is None or end is None else end - start <= size  # all of the cell
            got = SeekTable.parse(tail, key=where, max_frames=max_frames)
            if isinstance(got, int):
                if whole:
                    raise FormatError(f"{where}: seek table needs {got} bytes, the cell holds {len(tail)}")
                return await one(key, start, end, got)
            if got is None:
                return empty
            if whole and got.frames_nbytes + got.nbytes != len(tail):
                raise FormatError(f"{where}: seek table lists {got.frames_nbytes} bytes of frames, the cell holds "
                                  f"{len(tail) - got.nbytes} before its table")
            return got

        return list(await self.executor.gather([one(k, s, e, size) for (k, s, e), size in zip(ends, sizes)]))

    async def rows_meeting(self, chunks: ChunkList, n_rows: Sequence[int], row_bytes: int, guess: SeekGuess,
                           max_frames: int, lo: np.ndarray, hi: np.ndarray) -> list[np.ndarray | None]:
        """For each absolute chunk of ``n_rows`` rows (by its fragment index), the (start, stop) row spans of its
        cell's frames whose bounds meet the closed box ``lo``..``hi``: no other row of the cell can be in it.
        None for a cell whose seek table has no bounds.  The tables come through :meth:`seek_tables` (cached)."""
        coords = np.asarray(chunks, dtype=np.int64).reshape(len(chunks), -1)
        out: list[np.ndarray | None] = []
        for c, n, table in zip(coords, n_rows, await self.seek_tables(coords, guess, max_frames)):
            meets = table.frames_meeting(lo, hi) if table.num_frames else None
            if meets is None:
                out.append(None)
                continue
            ends = table.row_ends(n, row_bytes, key=self._frame_key(self.cell_coords(c)))
            spans = np.stack([ends - np.diff(ends, prepend=0), ends], axis=1)[meets]
            out.append(spans[spans[:, 1] > spans[:, 0]])
        return out

    async def frame_rows(self, chunks: ChunkList, spans: Sequence[np.ndarray], row_bytes: int, n_rows: Sequence[int],
                         guess: SeekGuess, max_frames: int) -> list[bytes | memoryview | None]:
        """For each absolute chunk, the concatenated bytes of its row spans [(start, stop), ...] in a cell of
        ``n_rows`` rows (by its fragment index): from the frames of a seekable cell holding them -- the frames
        of every cell in one batch of ranges (coalesced per object), each decoded frame cached -- or from the
        whole cell where it has no seek table or the cost model prefers it whole.  Each table is checked
        against the rows (sizes, whole rows per frame, the vlen header), every frame against its table."""
        coords = np.asarray(chunks, dtype=np.int64).reshape(len(chunks), -1)
        tables = await self.seek_tables(coords, guess, max_frames)
        grid = [self.cell_coords(c) for c in coords]
        handle = self.executor.handle
        overread = tuning().max_overread
        out: list[bytes | memoryview | None] = [b""] * len(grid)
        whole: list[int] = []
        plans: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}  # i -> spans, first, last, frames
        for i, (g, table) in enumerate(zip(grid, tables)):
            sp = np.asarray(spans[i], dtype=np.int64).reshape(-1, 2)
            sp = sp[sp[:, 1] > sp[:, 0]]
            if table.num_frames == 0:
                whole.append(i)
                continue
            rows_end = table.row_ends(n_rows[i], row_bytes, key=self._frame_key(g))
            if not len(sp):
                continue
            first = np.searchsorted(rows_end, sp[:, 0], side="right")
            last = np.searchsorted(rows_end, sp[:, 1] - 1, side="right")
            frames = unique_ints(expand_ranges(first, last - first + 1))
            starts = table.starts
            needed = list(zip(starts[frames].tolist(), (starts + table.compressed)[frames].tolist()))
            if table.frames_nbytes <= overread * sum(e - b for b, e in needed) and choose_fetch(
                    table.frames_nbytes, needed, handle.latency_hint, handle.bandwidth_hint) == "whole":
                whole.append(i)
            else:
                plans[i] = (sp, first, last, frames)
        bases = await self._cell_bases([grid[i] for i in plans])
        base_of = dict(zip(plans, bases))

        async def fetch(missing: list[tuple[int, int]]) -> list[memoryview]:
            """Decoded frames ``(cell position, frame)``: runs of consecutive frames, one range each."""
            runs: list[tuple[int, int, int]] = []  # (i, first frame, last frame)
            for i, f in missing:
                if runs and runs[-1][0] == i and runs[-1][2] == f - 1:
                    runs[-1] = (i, runs[-1][1], f)
                else:
                    runs.append((i, f, f))
            ranges = []
            for i, a, b in runs:
                t = tables[i]
                lo = base_of[i] + int(t.starts[a])
                ranges.append(ByteRange(self.object_key(grid[i]), lo, lo + int(t.compressed[a:b + 1].sum())))
            parts = await self._read_narrowed(ranges)
            read = []
            for (i, a, b), part in zip(runs, parts):
                if part is None:
                    raise FormatError(f"{self._frame_key(grid[i])}: cell vanished while reading its frames")
                read.append((part, tables[i], a, b, self._frame_key(grid[i])))
            data, starts, stops = decode_frames(read)
            view = memoryview(data)  # type: ignore[arg-type]  # numpy's stubs: ndarray.__buffer__ on 3.12 only
            return [view[x:y] for x, y in zip(starts.tolist(), stops.tolist())]

        # decoded frames by (cell, frame), looked up one by one (no single-flight per frame: thousands of them)
        wanted = [(i, int(f)) for i, plan in plans.items() for f in plan[3]]
        keys = [("frame", self.object_key(grid[i]), grid[i], f) for i, f in wanted]
        decoded: list[memoryview | None] = [self.executor.get_cached(DECODED_CACHE, k) for k in keys]
        missing = [j for j, v in enumerate(decoded) if v is None]

        async def fill() -> None:
            for j, view in zip(missing, await fetch([wanted[j] for j in missing])):
                decoded[j] = view
                self.executor.put_cached(DECODED_CACHE, keys[j], view, len(view))

        wholes, _ = await self.executor.gather([self.payloads(coords[whole]), fill()])
        for i, payload in zip(whole, cast("list[bytes | memoryview | None]", wholes)):
            out[i] = _span_bytes(payload, np.asarray(spans[i], dtype=np.int64).reshape(-1, 2), row_bytes,
                                 self._frame_key(grid[i]))
        frames_of = iter(cast("list[memoryview]", decoded))
        for i, (sp, first, last, frames) in plans.items():
            table = tables[i]
            views = [next(frames_of) for _ in range(len(frames))]
            if frames[0] == 0 and bytes(views[0][:VLEN_HEADER]) != struct.pack("<II", 1, n_rows[i] * row_bytes):
                raise FormatError(f"{self._frame_key(grid[i])}: first frame's vlen header does not hold one item of "
                                  f"{n_rows[i]} rows")
            buf = memoryview(b"".join(views))
            at = np.zeros(table.num_frames, np.int64)  # where each frame read starts in ``buf``
            at[frames] = np.cumsum(table.decompressed[frames]) - table.decompressed[frames]
            skip = table.out_ends - table.decompressed - at  # payload offset -> ``buf`` offset, per frame
            lo = VLEN_HEADER + sp[:, 0] * row_bytes - skip[first]  # a span's frames lie back to back in ``buf``
            hi = VLEN_HEADER + sp[:, 1] * row_bytes - skip[last]
            out[i] = b"".join(buf[a:b] for a, b in zip(lo.tolist(), hi.tolist()))
        return out

    def _frame_key(self, g: tuple[int, ...]) -> str:
        """A cell's name in errors: its key, or its shard's key and its place in the shard."""
        return self.object_key(g) if self.codec.shard is None else f"{self.object_key(g)}[{list(g)}]"

    async def _cell_bases(self, grid: list[tuple[int, ...]]) -> list[int]:
        """Byte offset of each cell in the object holding it: 0 for plain cells, from the (cached) shard index
        for inner chunks."""
        if self.codec.shard is None:
            return [0] * len(grid)
        by_shard = group_by_shard(grid, self._inner_per_shard())
        keys = {s: self.key_of(s) for s in by_shard}
        indexes = await self.executor.gather([self._shard_index(keys[s]) for s in by_shard])
        out = [0] * len(grid)
        for (shard, members), index in zip(by_shard.items(), indexes):
            if index is None:
                raise FormatError(f"{keys[shard]}: shard vanished while reading its frames")
            for i, start, _n in zip(members, *self._spans(grid, members, shard, *index)):
                if start < 0:
                    raise FormatError(f"{self._frame_key(grid[i])}: inner chunk vanished while reading its frames")
                out[i] = start
        return out

    async def row_spans(self, chunk: ChunkCoords, spans: np.ndarray, row_bytes: int) -> bytes | None:
        """Concatenated bytes of row spans [(start, stop), ...] of an uncompressed plain cell."""
        key = self.key_of(self.cell_coords(chunk))
        bounds = [(VLEN_HEADER + int(a) * row_bytes, VLEN_HEADER + int(b) * row_bytes) for a, b in spans]
        parts = await self._read_narrowed([ByteRange(key, start, end) for start, end in bounds])
        present = [p for p in parts if p is not None]
        if len(present) < len(parts):
            await self._absent(key, chunk)
            return None
        for p, (start, end) in zip(present, bounds):
            if len(p) != end - start:
                raise FormatError(f"{key}: cell ends at byte {start + len(p)}, before rows it indexes ({end})")
        return b"".join(present)

    async def _read_narrowed(self, ranges: list[ByteRange]) -> list[bytes | None]:
        """Ranges of a read narrowed to save bytes (bins' rows, frames): holes between them are read through only
        while they add ``narrow_bridge_fraction`` of its bytes, not up to the handle's whole coalesce gap."""
        gap = bridging_gap(ranges, self.executor.handle.coalesce_gap, tuning().narrow_bridge_fraction)
        return await self.executor.read_ranges(ranges, max_gap=gap)

    def _inner_per_shard(self) -> tuple[int, ...]:
        """Inner chunks per shard along each axis (only the sharded reads ask)."""
        shard = self.codec.shard
        assert shard is not None, f"{self.path} is not sharded"
        return shard

    async def _shard_index(self, shard_key: str) -> tuple[NDArray[np.uint64], NDArray[np.uint64]] | None:
        n_inner = int(np.prod(self._inner_per_shard()))
        tail = await self.executor.get_suffix(shard_key, index_nbytes(n_inner), cache="shard_index")
        if tail is None:
            return None
        return decode_shard_index(tail, n_inner, key=shard_key)

    async def prefetch_indexes(self, max_shards: int) -> None:
        """The shard indexes of a sharded array that lists at most ``max_shards`` shards (read while a dataset
        opens, beside its other prefetches: a first box query then costs no index round trip).  A damaged
        index is left for the read that needs it to report: the rest of the store stays readable."""
        listed = self._listed_per_shard if self.codec.shard is not None else None
        if listed is not None and len(listed) <= max_shards:
            await self.executor.gather([self._index_if_sound(self.key_of(s)) for s in listed])

    async def _index_if_sound(self, shard_key: str) -> None:
        with contextlib.suppress(FormatError):
            await self._shard_index(shard_key)

    @cached_property
    def _listed_per_shard(self) -> dict[tuple[int, ...], int] | None:
        """Cells of each shard by the array's ``nonempty_chunks`` (None when it lists none)."""
        if "nonempty_chunks" not in self.meta.attributes:
            return None
        per = np.asarray(self.codec.shard, dtype=np.int64)
        cells = self.meta.nonempty_chunk_array.reshape(-1, len(per)) - self.origin
        shards, counts = np.unique(cells // per, axis=0, return_counts=True)
        return dict(zip(map(tuple, shards.tolist()), counts.tolist()))

    def _stored_in(self, shard: tuple[int, ...]) -> int:
        """Inner chunks ``shard`` holds: as listed, else every one inside the array (edge shards hold fewer)."""
        listed = self._listed_per_shard
        if listed is not None and listed.get(shard):
            return listed[shard]
        per = np.asarray(self.codec.shard, dtype=np.int64)
        left = np.asarray(self.meta.shape, dtype=np.int64)[:len(per)] - np.asarray(shard, dtype=np.int64) * per
        return int(np.prod(np.clip(left, 0, per)))

    async def _whole_shard(self, shard_key: str, keep: bool = False) -> WholeShard | None:
        """(shard bytes, offsets, nbytes) by one GET of the whole shard, the index from its end (None: absent).

        The index is cached as the suffix read would cache it, so later reads of a few inner chunks skip it;
        with ``keep`` the whole shard is cached too (a level sweep reads the rest of it next).
        """
        hit: WholeShard | None = self.executor.get_cached(SHARD_CACHE, shard_key)
        if hit is not None:
            return hit
        raw = await self.executor.get_view(shard_key)
        if raw is None:
            return None
        n_inner = int(np.prod(self._inner_per_shard()))
        offsets, nbytes = decode_shard_index(raw, n_inner, key=shard_key)
        self.executor.cache_suffix("shard_index", shard_key, memoryview(raw)[len(raw) - index_nbytes(n_inner):])
        if keep:
            self.executor.put_cached(SHARD_CACHE, shard_key, (raw, offsets, nbytes), nbytes=len(raw))
        return raw, offsets, nbytes

    async def _sharded(self, grid: list[tuple[int, ...]], keep: bool = False) -> list[bytes | memoryview | None]:
        """Inner chunks by shard: a shard asked for (nearly) whole -- 3/4 of the cells it stores -- whose index is
        not cached yet, or kept for a sweep, comes in one GET; otherwise its index (one suffix read, cached), then
        its inner chunks as ranges (coalesced: a large shard comes in parts of at most the handle's
        ``coalesce_max``, fetched at once -- one connection alone does not fill the link)."""
        by_shard = group_by_shard(grid, self._inner_per_shard())
        out: list[bytes | memoryview | None] = [None] * len(grid)
        todo: list[tuple[int, bytes | memoryview, str]] = []  # (slot, stored bytes, name) decoded together at the end
        shard_keys = {s: self.key_of(s) for s in by_shard}
        n_inner = int(np.prod(self._inner_per_shard()))
        whole = [s for s, members in by_shard.items() if keep or (
            4 * len(members) >= 3 * self._stored_in(s)
            and self.executor.get_cached("shard_index", ("suffix", shard_keys[s], index_nbytes(n_inner))) is None)]
        whole_set = set(whole)
        ranged = [s for s in by_shard if s not in whole_set]
        got = await self.executor.gather([self.executor.gather([self._whole_shard(shard_keys[s], keep) for s in whole]),
                                          self.executor.gather([self._shard_index(shard_keys[s]) for s in ranged])])
        # one gather of two differently typed lists: its result type joins them to object
        wholes = cast("list[WholeShard | None]", got[0])
        indexes = cast("list[tuple[NDArray[np.uint64], NDArray[np.uint64]] | None]", got[1])
        ranges, slots = [], []
        for shard, found in zip(whole, wholes):
            if found is None:
                await self._shard_absent(shard_keys[shard], [grid[i] for i in by_shard[shard]])
                continue
            raw, offsets, nbytes = found
            view = memoryview(raw)
            members = by_shard[shard]
            for i, start, n in zip(members, *self._spans(grid, members, shard, offsets, nbytes)):
                if start >= 0:
                    todo.append((i, view[start:start + n], f"{shard_keys[shard]}[{grid[i]}]"))
                else:
                    await self._shard_absent(shard_keys[shard], [grid[i]])
        for shard, index in zip(ranged, indexes):
            if index is None:
                await self._shard_absent(shard_keys[shard], [grid[i] for i in by_shard[shard]])
                continue
            members = by_shard[shard]
            for i, start, n in zip(members, *self._spans(grid, members, shard, *index)):
                if start >= 0:
                    ranges.append(ByteRange(shard_keys[shard], start, start + n))
                    slots.append(i)
                else:
                    await self._shard_absent(shard_keys[shard], [grid[i]])
        raws = await self.executor.read_ranges(ranges)
        for i, part, r in zip(slots, raws, ranges):
            if part is None:
                raise FormatError(f"{r.key}: shard shrank while reading inner chunk {grid[i]}")
            todo.append((i, part, f"{r.key}[{grid[i]}]"))
        for (i, _, _), payload in zip(todo, await self._decode_all([(raw, name) for _, raw, name in todo])):
            out[i] = payload
        return out

    async def _decode_all(self, items: list[tuple[bytes | memoryview, str]]) -> list[memoryview]:
        """Decode stored cells: on the event loop while they are few, small or uncompressed, else in ``decode_threads``
        worker threads at once (zstd lets go of the GIL: a bulk read decodes on every core).  Each thread's
        decoder has the array's whole :attr:`max_payload` budget, and the sum is checked after, so a lying
        store inflates at most ``decode_threads`` times what its level declares before it is refused."""
        settings = tuning()
        threads = min(settings.decode_threads, len(items))
        stored = sum(len(raw) for raw, _ in items)
        if threads < 2 or not self.codec.compressors or stored < settings.thread_decode_bytes:
            decode = self._decoder()
            return [decode(raw, name) for raw, name in items]
        groups = [items[g::threads] for g in range(threads)]

        def run(group: list[tuple[bytes | memoryview, str]]) -> list[memoryview]:
            decode = self._decoder()
            return [decode(raw, name) for raw, name in group]

        done = await self.executor.gather([anyio.to_thread.run_sync(run, g) for g in groups])
        out: list[memoryview] = [memoryview(b"")] * len(items)
        for g, decoded in enumerate(done):
            out[g::threads] = decoded
        if self.max_payload is not None and sum(len(p) for p in out) > self.max_payload:
            level = self.path.split("/", 1)[0]
            raise SizeLimitError(f"{self.path}: its cells decode to more than {level}/zarr.json's vertex_count "
                                 f"of {self.rows} rows allows ({self.max_payload} bytes)")
        return out

    async def _shard_absent(self, shard_key: str, cells: list[tuple[int, ...]]) -> None:
        """Inner chunks (grid coordinates) a shard lacks: :meth:`_absent` for each."""
        for cell in cells:
            await self._absent(f"{shard_key}[{list(cell)}]", np.asarray(cell, dtype=np.int64) + self.origin)

    def _spans(self, grid: list[tuple[int, ...]], members: list[int], shard: tuple[int, ...], offsets: np.ndarray,
               nbytes: np.ndarray) -> tuple[list[int], list[int]]:
        """(start, size) in ``shard`` of each member cell's inner chunk, start -1 when absent (one numpy step)."""
        per = np.asarray(self.codec.shard, dtype=np.int64)
        local = np.asarray([grid[i] for i in members], dtype=np.int64).reshape(len(members), -1) - np.asarray(
            shard, dtype=np.int64) * per
        slot = np.ravel_multi_index(tuple(local.T), tuple(per.tolist()))
        starts = offsets[slot]
        absent = starts == EMPTY
        return (np.where(absent, -1, starts.astype(np.int64)).tolist(),
                np.where(absent, 0, nbytes[slot].astype(np.int64)).tolist())


def _span_bytes(payload: bytes | memoryview | None, spans: np.ndarray, row_bytes: int, key: str) -> bytes | None:
    """Row spans [(start, stop), ...] of a decoded cell payload, concatenated (None: absent)."""
    if payload is None:
        return None
    mv = memoryview(payload)
    if len(spans) and int(spans[:, 1].max()) * row_bytes > mv.nbytes:
        raise FormatError(f"{key}: cell of {mv.nbytes} bytes ends before the rows its fragment index lists")
    return b"".join(mv[int(a) * row_bytes:int(b) * row_bytes] for a, b in spans)


def _payload_bytes(payload: bytes | memoryview | None) -> int:
    """What a decoded cell costs the cache (nothing when absent: absent cells are not kept)."""
    return 0 if payload is None else len(payload)


def group_by_shard(cells: ChunkList, per: Sequence[int]) -> dict[tuple[int, ...], list[int]]:
    """Positions of the given cell coordinates grouped by the shard of ``per`` cells holding each, shards in
    order of first appearance."""
    inner = np.asarray(per, dtype=np.int64)
    at = np.asarray(cells, dtype=np.int64).reshape(len(cells), len(inner)) // inner
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, s in enumerate(map(tuple, at.tolist())):
        groups.setdefault(s, []).append(i)
    return groups


def rows_from_payload(
    payload: bytes | memoryview | None, dtype: np.dtype, row_shape: tuple[int, ...], *, key: str
) -> np.ndarray:
    """View a cell payload as rows of ``dtype`` x ``row_shape``; empty when absent."""
    dtype = np.dtype(dtype).newbyteorder("<")
    width = math.prod(row_shape)
    if payload is None:
        return np.zeros((0, *row_shape), dtype=dtype)
    row_bytes = dtype.itemsize * width
    if len(payload) % row_bytes:
        raise FormatError(f"{key}: payload of {len(payload)} bytes is not a whole number of {row_bytes}-byte rows")
    return np.frombuffer(payload, dtype=dtype).reshape(-1, *row_shape)
