"""Object id -> manifest, fetching only the manifests asked for.

The reference reads every manifest of a level to answer for one object.
Here the manifests array is read per chunk (plain layout: one chunk of up
to 16384 manifests, fetched once and cached) or, in the sharded layout zvf
writes, per inner chunk of a few manifests: one suffix read of the shard
index (cached, and prefetched at open for small indexes) and one ranged
read for the manifests themselves.  Object ids map to rows through the
``object_ids`` array, read whole once.

Manifests never become one Python object each: a fetched unit (a plain
chunk, an inner chunk, or a whole shard when most of it is wanted) is
decoded in one batch into ``(buffer, starts, lengths)`` and cached that
way, and :func:`decode_manifests_packed` reads the rows straight from it.
The ids and every whole unit are fetched and decoded once however many
readers ask for them at the same time (the executor's single flight).
"""

from __future__ import annotations

from collections.abc import Awaitable
from functools import partial
from typing import TYPE_CHECKING, TypeAlias, TypeVar, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..config import tuning
from ..errors import FormatError, MissingDataError
from ..format.manifest import ManifestTable, decode_manifests_packed
from ..format.shard import EMPTY, decode_shard_index, index_nbytes
from ..io.plan import ByteRange
from .dense import read_dense
from .points import off_loop
from .rowops import unique_ints

if TYPE_CHECKING:
    from ..format.types import BytesLike
    from ..io.executor import Executor
    from .load import Level

Unit: TypeAlias = tuple[NDArray[np.uint8], NDArray[np.int64], NDArray[np.int64]]
"""A decoded unit of manifests: (buffer, starts, lengths), one row per manifest."""
Located: TypeAlias = tuple[list[Unit], NDArray[np.intp], NDArray[np.int64]]
"""Units holding some rows, and per row (its unit, its row within it)."""
ShardIndex: TypeAlias = tuple[NDArray[np.uint64], NDArray[np.uint64]]
"""(offsets, nbytes) of a shard's inner chunks."""



class ObjectIndex:
    """Manifests of one level, addressed by object id."""

    def __init__(self, executor: Executor, level: Level, ndim: int) -> None:
        self.ex = executor
        self.level_index = level.index  # not the level: it holds this index, and a cycle outlives its dataset
        self.ndim = ndim
        self.manifests = level.need("object_index/manifests")
        self.ids_array = level.array("object_index/object_ids")
        self.count = int(self.manifests.meta.shape[0])
        self._ids: NDArray[np.int64] | None = None
        self.rows_per_chunk = int(self.manifests.meta.chunk_shape[0])  # a shard when sharded
        codec = self.manifests.codec
        self.inner = None if codec.shard is None else (codec.inner_rows or 1)

    # ------------------------------------------------------------- ids
    async def prefetch(self) -> None:
        """Object ids and (small) shard indexes, so object reads skip those round trips."""
        jobs: list[Awaitable[object]] = []
        limit = tuning().manifest_prefetch_bytes
        if self.ids_array is not None and self.count * 8 <= limit:
            jobs.append(self.ids())
        if self.inner is not None:
            n_inner = self.rows_per_chunk // self.inner
            n_shards = -(-self.count // self.rows_per_chunk)
            if n_shards * index_nbytes(n_inner) <= limit:
                jobs += [self._shard_index(s) for s in range(n_shards)]
        await self.ex.gather(jobs)

    async def ids(self) -> NDArray[np.int64]:
        """Object id of each manifest row (row number when the store lists none)."""
        if self._ids is None:
            self._ids = await self.ex.once(("object_ids", id(self)), self._read_ids)
        return self._ids

    async def _read_ids(self) -> NDArray[np.int64]:
        if self.ids_array is None:
            return np.arange(self.count, dtype=np.int64)
        declared = int(self.ids_array.meta.shape[0])
        if declared != self.count:  # before reading (and allocating) a shape only the document claims
            raise FormatError(f"{self.ids_array.path}/zarr.json: shape {declared} object ids for "
                              f"{self.count} manifests")
        ids = np.asarray(await read_dense(self.ex, self.ids_array)).astype(np.int64).reshape(-1)
        if len(ids) != self.count:
            raise FormatError(f"{self.ids_array.path}: {len(ids)} object ids for {self.count} manifests")
        return ids

    # ------------------------------------------------------------- manifests
    async def table(self, rows: np.ndarray) -> ManifestTable:
        """Decoded manifests of ``rows``; ``object_row`` indexes into ``rows``."""
        rows = np.asarray(rows, dtype=np.int64)
        parts, part, local = await (self._sharded(rows) if self.inner is not None else self._plain(rows))

        def decode() -> ManifestTable:
            buf, starts, lengths = _gather(parts, part, local)
            return decode_manifests_packed(buf, starts, lengths, self.ndim, key=self.manifests.path)

        return await off_loop(sum(int(u[0].size) for u in parts), decode)

    async def every_row(self) -> ManifestTable:
        """Every manifest of the level.  Sharded: shard by shard, each parsed in a worker thread as soon as
        it is decoded, so parsing one overlaps the download and decompression of the others."""
        if self.inner is None or self.count <= self.rows_per_chunk:
            return await self.table(np.arange(self.count, dtype=np.int64))
        per = self.rows_per_chunk

        async def shard_table(s: int) -> ManifestTable:
            buf, starts, lengths = await self._whole_shard(s)
            n = min(per, self.count - s * per)
            return await off_loop(buf.size, partial(decode_manifests_packed, buf, starts[:n], lengths[:n], self.ndim,
                                                    key=self.manifests.path))

        tables = await self.ex.gather([shard_table(s) for s in range(-(-self.count // per))])
        return await off_loop(sum(8 * (3 + self.ndim) * len(t) for t in tables), partial(ManifestTable.concat, tables))

    def _inner_rows(self) -> int:
        """Manifests per inner chunk; only reads of the sharded layout ask."""
        assert self.inner is not None  # callers run on the sharded path only
        return self.inner

    def _remember(self, what: tuple[str, int], unit: Unit) -> None:
        """Cache a decoded unit (buffer, starts, lengths), charged for its own bytes."""
        self.ex.put_cached("manifest", (self.manifests.path, *what), unit, nbytes=_unit_nbytes(unit))

    def _decode(self, blob: BytesLike, starts: ArrayLike, ends: ArrayLike, per_unit: int, key: str) -> list[Unit]:
        """Stored chunks -> one decoded (buffer, starts, lengths) per chunk, in one batch."""
        buf, counts, ist, iln = self.manifests.codec.decode_items_many(blob, starts, ends, key=key)
        short = counts < per_unit
        if short.any():
            j = int(np.flatnonzero(short)[0])
            raise FormatError(f"{key}[{j}]: {int(counts[j])} manifests, expected {per_unit}")
        first = np.cumsum(counts) - counts
        return [(buf, ist[f:f + per_unit], iln[f:f + per_unit]) for f in first.tolist()]

    async def _plain(self, rows: NDArray[np.int64]) -> Located:
        per = self.rows_per_chunk
        cells, part = np.unique(rows // per, return_inverse=True)
        parts = await self.ex.gather([self._plain_chunk(c) for c in cells.tolist()])
        return parts, part, rows % per

    async def _plain_chunk(self, c: int) -> Unit:
        """The decoded unit of plain manifest chunk ``c`` (cached)."""

        async def fetch() -> Unit:
            key = self.manifests.key_of((c,))
            want = min(self.rows_per_chunk, self.count - c * self.rows_per_chunk)
            raw = await self.ex.get(key)
            return _empty(want) if raw is None else self._decode(raw, [0], [len(raw)], want, key)[0]

        return await self.ex.cached("manifest", (self.manifests.path, "chunk", c), fetch, _unit_nbytes)

    async def _shard_index(self, shard: int) -> ShardIndex | None:
        """A shard's index, by one suffix read that brings the whole shard when it is small.

        The suffix asked for is the index or one round trip's worth of bytes
        (latency x bandwidth, at most the ``manifest_prefetch_bytes`` setting), whichever is larger: a
        shard that fits comes back whole and is kept raw, so the first object
        read in it needs no manifest request at all.
        """
        key = self.manifests.key_of((shard,))
        n_inner = self.rows_per_chunk // self._inner_rows()
        index_size = index_nbytes(n_inner)
        handle = self.ex.handle
        want = max(index_size, min(tuning().manifest_prefetch_bytes, int(handle.latency_hint * handle.bandwidth_hint)))
        tail = await self.ex.get_suffix(key, want, cache="shard_index")
        if tail is None:
            return None
        if len(tail) < want and self.ex.get_cached("manifest", (self.manifests.path, "shard", shard)) is None:
            self.ex.put_cached("manifest", (self.manifests.path, "shard", shard), tail)  # the whole shard
        return decode_shard_index(tail[-index_size:], n_inner, key=key)

    async def _sharded(self, rows: NDArray[np.int64]) -> Located:
        """Units holding ``rows``: whole shards, or inner chunks by ranged reads.

        A shard is read and decoded whole when it costs no more than a round
        trip (latency x bandwidth) or when the inner chunks asked for make up
        half of its bytes: one request instead of many ranges, and the
        decoded shard serves every later read in it.
        """
        per, k = self.rows_per_chunk, self._inner_rows()
        slots = per // k
        path = self.manifests.path
        shard_of = rows // per
        shards = unique_ints(shard_of).tolist()
        whole: dict[int, Unit | None] = {s: self.ex.get_cached("manifest", (path, "rows", s)) for s in shards}
        todo = [s for s in shards if whole[s] is None]
        indexes = dict(zip(todo, await self.ex.gather([self._shard_index(s) for s in todo])))
        handle = self.ex.handle
        break_even = handle.latency_hint * handle.bandwidth_hint
        fetch_whole, inner_ranges, inner_ids = [], [], []
        at_hand: list[tuple[int, bytes | memoryview]] = []  # inner chunks cut from a shard the open prefetched
        for s in todo:
            index = indexes[s]
            if index is None:  # absent shard: empty manifests
                whole[s] = _empty(per)
                continue
            offsets, nbytes = index
            present = offsets != EMPTY
            end = _stored_end(offsets, nbytes, present)
            wanted = unique_ints(rows[shard_of == s] // k) - s * slots
            wanted_bytes = int(nbytes[wanted[present[wanted]]].sum())
            raw: bytes | None = self.ex.get_cached("manifest", (path, "shard", s))
            if 2 * wanted_bytes >= end or (raw is None and end <= break_even):
                fetch_whole.append(s)
                continue
            for slot in wanted.tolist():
                i = s * slots + slot
                if self.ex.get_cached("manifest", (path, "inner", i)) is None and present[slot]:
                    r = ByteRange(self.manifests.key_of((s,)), int(offsets[slot]), int(offsets[slot] + nbytes[slot]))
                    if raw is not None:  # its bytes are here: decode only the inner chunks asked for
                        at_hand.append((i, _whole(memoryview(raw)[r.start:r.end], r)))
                        continue
                    inner_ranges.append(r)
                    inner_ids.append(i)
        both = await self.ex.gather([self.ex.gather([self._whole_shard(s) for s in fetch_whole]),
                                     self.ex.read_ranges(inner_ranges)])
        # one wave for both kinds: gather types its results by their join, so each is named back
        whole.update(zip(fetch_whole, cast("list[Unit]", both[0])))
        pieces = at_hand + [(i, _whole(blob, r)) for i, blob, r in
                            zip(inner_ids, cast("list[bytes | None]", both[1]), inner_ranges)]
        if pieces:
            lens = np.fromiter((len(p) for _, p in pieces), dtype=np.int64, count=len(pieces))
            ends = np.cumsum(lens)
            units = self._decode(b"".join(p for _, p in pieces), ends - lens, ends, k, f"{path}/inner")
            for (i, _), unit in zip(pieces, units):
                self._remember(("inner", i), unit)
        # every row -> (unit, row within it)
        parts = [_empty(0) if (u := whole[s]) is None else u for s in shards]  # ranged shards: no rows
        in_whole = np.isin(shard_of, [s for s in shards if whole[s] is not None])
        part = np.searchsorted(shards, shard_of)
        local = rows - shard_of * per
        if not in_whole.all():
            inner_of = rows[~in_whole] // k
            uniq, inv = np.unique(inner_of, return_inverse=True)
            for i in uniq.tolist():
                unit = self.ex.get_cached("manifest", (path, "inner", i))
                parts.append(_empty(k) if unit is None else unit)  # None: absent inner chunk
            part[~in_whole] = len(shards) + inv
            local[~in_whole] = rows[~in_whole] % k
        return parts, part, local

    async def _whole_shard(self, s: int) -> Unit:
        """Every row of shard ``s`` as one decoded unit (cached): one request for the shard, decompressed and
        split in a worker thread (zstd drops the GIL, so two cores decode two shards)."""
        return await self.ex.cached("manifest", (self.manifests.path, "rows", s), partial(self._fetch_shard, s),
                                    _unit_nbytes)

    async def _fetch_shard(self, s: int) -> Unit:
        path = self.manifests.path
        index = await self._shard_index(s)
        if index is None:  # absent shard: empty manifests
            return _empty(self.rows_per_chunk)
        offsets, nbytes = index
        present = offsets != EMPTY
        raw: bytes | None = self.ex.get_cached("manifest", (path, "shard", s))
        if raw is None:
            r = ByteRange(self.manifests.key_of((s,)), 0, _stored_end(offsets, nbytes, present))
            raw = _whole((await self.ex.read_ranges([r]))[0], r)
        return await off_loop(len(raw), partial(self._decode_shard, s, raw, offsets, nbytes, present),
                              tuning().manifest_offload_bytes)

    def _decode_shard(self, shard: int, raw: bytes, offsets: NDArray[np.uint64], nbytes: NDArray[np.uint64],
                      present: NDArray[np.bool_]) -> Unit:
        """Every inner chunk of a shard in one batch -> one unit of ``rows_per_chunk`` rows (pure: runs in a thread)."""
        per, k = self.rows_per_chunk, self._inner_rows()
        slots = np.flatnonzero(present)
        starts = offsets[slots].astype(np.int64)
        buf, _counts, ist, iln = self.manifests.codec.decode_items_many(
            raw, starts, starts + nbytes[slots].astype(np.int64), key=f"{self.manifests.key_of((shard,))}",
            expected=k)
        row_starts = np.zeros(per, dtype=np.int64)
        row_lengths = np.zeros(per, dtype=np.int64)
        at = (slots[:, None] * k + np.arange(k)).reshape(-1)
        row_starts[at] = ist
        row_lengths[at] = iln
        return buf, row_starts, row_lengths


def _unit_nbytes(unit: Unit) -> int:
    """What a decoded unit (buffer, starts, lengths) costs in the cache: its own bytes."""
    return 64 + 16 * len(unit[1]) + int(unit[2].sum())


def _empty(n: int) -> Unit:
    """A unit of ``n`` absent manifests (zero-length rows)."""
    z = np.zeros(n, dtype=np.int64)
    return np.zeros(0, dtype=np.uint8), z, z


def _stored_end(offsets: NDArray[np.uint64], nbytes: NDArray[np.uint64], present: NDArray[np.bool_]) -> int:
    """Bytes of a shard up to the end of its last stored inner chunk (0 when none is)."""
    return int((offsets[present] + nbytes[present]).max()) if present.any() else 0


B = TypeVar("B", bytes, memoryview)


def _whole(blob: B | None, r: ByteRange) -> B:
    assert r.end is not None  # the ranges asked for here are bounded
    if blob is None or len(blob) != r.end - r.start:
        raise MissingDataError(f"{r.key}: shard is shorter than its index says")
    return blob


def _gather(parts: list[Unit], part: NDArray[np.intp], local: NDArray[np.int64]) -> Unit:
    """One buffer and per-row (starts, lengths) from the units rows fall in."""
    if not parts:
        return _empty(0)
    if len(parts) == 1:
        buf, st, ln = parts[0]
        return buf, st[local], ln[local]
    # units decoded in one batch share that batch's buffer: join each buffer once, not once per unit
    slot: dict[int, int] = {}
    which = [slot.setdefault(id(u[0]), len(slot)) for u in parts]
    bufs = list({id(u[0]): u[0] for u in parts}.values())
    sizes = np.fromiter((b.size for b in bufs), dtype=np.int64, count=len(bufs))
    bases = (np.cumsum(sizes) - sizes).tolist()
    counts = np.fromiter((len(u[1]) for u in parts), dtype=np.int64, count=len(parts))
    first = np.cumsum(counts) - counts
    starts = np.concatenate([u[1] + bases[w] for u, w in zip(parts, which)])
    lengths = np.concatenate([u[2] for u in parts])
    at = first[part] + local
    return np.concatenate(bufs), starts[at], lengths[at]
