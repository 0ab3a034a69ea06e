"""Fetch and decode the cells of one Zarr array, sharded or not.

A ``CellArray`` turns "the payloads of these chunks" into the fewest
requests the layout allows: plain cells are one GET each (missing = empty
chunk); sharded cells read the shard index once by suffix range (cached)
and then fetch only the inner chunks asked for, coalesced per shard.
Uncompressed plain cells can also be read partially, by row span.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import FormatError
from ..format.codecs import CellCodec
from ..format.keys import ChunkKeyEncoding
from ..format.metadata import ArrayMeta
from ..format.shard import decode_shard_index, index_nbytes
from ..io.executor import Executor
from ..io.plan import ByteRange

# Payload header of a one-item vlen frame: u32 count, u32 length.
VLEN_HEADER = 8


@dataclass
class CellArray:
    """One array's cells: key layout, codec and sharding, bound to an executor."""

    executor: Executor
    path: str  # array path relative to the store root, e.g. "0/vertices"
    meta: ArrayMeta
    codec: CellCodec = field(init=False)
    keys: ChunkKeyEncoding = field(init=False)
    origin: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        key = f"{self.path}/zarr.json"
        self.codec = CellCodec.from_array_metadata(self.meta.raw, key=key)
        self.keys = ChunkKeyEncoding.from_metadata(self.meta.raw)
        self.origin = np.asarray(self.meta.grid_origin, dtype=np.int64)

    # ------------------------------------------------------------- keys
    def cell_coords(self, coords) -> tuple[int, ...]:
        """Zarr grid position of an absolute chunk coordinate."""
        rel = np.asarray(coords, dtype=np.int64) - self.origin
        return tuple(int(c) for c in rel)

    def key_of(self, grid_coords: tuple[int, ...]) -> str:
        return self.keys.key(self.path, grid_coords)

    def keys_of(self, chunks) -> list[str]:
        """Key of each absolute chunk coordinate in ``chunks`` (a sequence of them)."""
        if not len(chunks):
            return []
        return self.keys.keys(self.path, np.asarray(chunks, dtype=np.int64).reshape(len(chunks), -1) - self.origin)

    @property
    def partial_rows_ok(self) -> bool:
        """Rows can be range-read straight from storage: no compression, no shards."""
        return not self.codec.compressors and self.codec.shard is None

    # ------------------------------------------------------------- reads
    async def payloads(self, chunks) -> list[bytes | None]:
        """Decoded payload of each absolute chunk (None for an absent cell)."""
        if self.codec.shard is None:
            keys = self.keys_of(chunks)
            raws = await self.executor.get_many(keys)
            return [None if raw is None else self.codec.decode_view(raw, key=k) for raw, k in zip(raws, keys)]
        return await self._sharded([self.cell_coords(c) for c in chunks])

    async def payload(self, chunk) -> bytes | memoryview | None:
        """Decoded payload of one absolute chunk: one GET of a plain cell, no gather around it."""
        grid = self.cell_coords(chunk)
        if self.codec.shard is not None:
            return (await self._sharded([grid]))[0]
        key = self.key_of(grid)
        raw = await self.executor.get(key)
        return None if raw is None else self.codec.decode_view(raw, key=key)

    async def items(self, grid_coords: tuple[int, ...]) -> list[memoryview] | None:
        """All items of one multi-item cell (1-D vlen arrays such as manifests)."""
        key = self.key_of(grid_coords)
        raw = await self.executor.get(key, cache="manifest")
        if raw is None:
            return None
        return self.codec.decode_items(raw, key=key)

    async def row_spans(self, chunk, spans: np.ndarray, row_bytes: int) -> bytes | None:
        """Concatenated bytes of row spans [(start, stop), ...] of an uncompressed plain cell."""
        key = self.key_of(self.cell_coords(chunk))
        ranges = [ByteRange(key, VLEN_HEADER + int(a) * row_bytes, VLEN_HEADER + int(b) * row_bytes) for a, b in spans]
        parts = await self.executor.read_ranges(ranges)
        if any(p is None for p in parts):
            return None
        for p, r in zip(parts, ranges):
            if len(p) != r.end - r.start:
                raise FormatError(f"{key}: cell ends at byte {r.start + len(p)}, before rows it indexes ({r.end})")
        return b"".join(parts)

    async def _shard_index(self, shard_key: str):
        n_inner = int(np.prod(self.codec.shard))
        tail = await self.executor.get_suffix(shard_key, index_nbytes(n_inner), cache="shard_index")
        if tail is None:
            return None
        return decode_shard_index(tail, n_inner, key=shard_key)

    async def _sharded(self, grid: list[tuple[int, ...]]) -> list[bytes | None]:
        inner = np.asarray(self.codec.shard, dtype=np.int64)
        by_shard: dict[tuple[int, ...], list[int]] = {}
        for i, g in enumerate(grid):
            by_shard.setdefault(tuple(int(x) for x in np.asarray(g) // inner), []).append(i)
        out: list[bytes | None] = [None] * len(grid)
        shard_keys = {s: self.key_of(s) for s in by_shard}
        indexes = await self.executor.gather([self._shard_index(k) for k in shard_keys.values()])
        ranges, slots = [], []
        for (shard, members), index in zip(by_shard.items(), indexes):
            if index is None:
                continue
            offsets, nbytes = index
            for i in members:
                local = np.asarray(grid[i]) - np.asarray(shard) * inner
                slot = int(np.ravel_multi_index(tuple(local), tuple(inner)))
                if int(offsets[slot]) == 2**64 - 1:
                    continue
                start = int(offsets[slot])
                ranges.append(ByteRange(shard_keys[shard], start, start + int(nbytes[slot])))
                slots.append(i)
        raws = await self.executor.read_ranges(ranges)
        for i, raw, r in zip(slots, raws, ranges):
            if raw is None:
                raise FormatError(f"{r.key}: shard shrank while reading inner chunk {grid[i]}")
            out[i] = self.codec.decode_view(raw, key=f"{r.key}[{grid[i]}]")
        return out


def rows_from_payload(payload: bytes | None, dtype: np.dtype, row_shape: tuple[int, ...], *, key: str) -> np.ndarray:
    """View a cell payload as rows of ``dtype`` x ``row_shape``; empty when absent."""
    dtype = np.dtype(dtype).newbyteorder("<")
    width = int(np.prod(row_shape)) if row_shape else 1
    if payload is None:
        return np.zeros((0, *row_shape), dtype=dtype)
    row_bytes = dtype.itemsize * width
    if len(payload) % row_bytes:
        raise FormatError(f"{key}: payload of {len(payload)} bytes is not a whole number of {row_bytes}-byte rows")
    return np.frombuffer(payload, dtype=dtype).reshape(-1, *row_shape)
