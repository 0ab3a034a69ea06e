"""Object id -> manifest, fetching only the manifests asked for.

The reference reads every manifest of a level to answer for one object.
Here the manifests array is read per chunk (plain layout: one chunk of up
to 16384 manifests, fetched once and cached) or, in the sharded layout zvf
writes, per inner chunk of a few manifests: one suffix read of the shard
index (cached, and prefetched at open for small indexes) and one ranged
read for the manifests themselves.  Object ids map to rows through the
``object_ids`` array, read whole once.
"""

from __future__ import annotations

import numpy as np

from ..errors import FormatError, InvalidArgumentError, MissingDataError
from ..format.manifest import ManifestTable, decode_manifests
from ..format.shard import decode_shard_index, index_nbytes
from ..io.plan import ByteRange
from .dense import read_dense

EMPTY = 2**64 - 1
# Prefetch object ids and shard indexes at open only while they are this small.
PREFETCH_LIMIT = 1 << 20


class ObjectIndex:
    """Manifests of one level, addressed by object id."""

    def __init__(self, executor, level, ndim: int):
        self.ex = executor
        self.level = level
        self.ndim = ndim
        self.manifests = level.array("object_index/manifests")
        self.ids_array = level.array("object_index/object_ids")
        if self.manifests is None:
            raise FormatError(f"{level.index}/object_index/manifests: missing although the level has objects")
        self.count = int(self.manifests.meta.shape[0])
        self._ids: np.ndarray | None = None
        self._order: np.ndarray | None = None  # rows in ascending id order
        self.rows_per_chunk = int(self.manifests.meta.chunk_shape[0])  # a shard when sharded
        codec = self.manifests.codec
        self.inner = None if codec.shard is None else (codec.inner_rows or 1)

    # ------------------------------------------------------------- ids
    async def prefetch(self) -> None:
        """Object ids and (small) shard indexes, so object reads skip those round trips."""
        jobs = []
        if self.ids_array is not None and self.count * 8 <= PREFETCH_LIMIT:
            jobs.append(self.ids())
        if self.inner is not None:
            n_inner = self.rows_per_chunk // self.inner
            n_shards = -(-self.count // self.rows_per_chunk)
            if n_shards * index_nbytes(n_inner) <= PREFETCH_LIMIT:
                jobs += [self._shard_index(s) for s in range(n_shards)]
        await self.ex.gather(jobs)

    async def ids(self) -> np.ndarray:
        """Object id of each manifest row (row number when the store lists none)."""
        if self._ids is None:
            if self.ids_array is None:
                self._ids = np.arange(self.count, dtype=np.int64)
            else:
                ids = np.asarray(await read_dense(self.ex, self.ids_array)).astype(np.int64).reshape(-1)
                if len(ids) != self.count:
                    raise FormatError(f"{self.ids_array.path}: {len(ids)} object ids for {self.count} manifests")
                self._ids = ids
        return self._ids

    async def rows_of(self, object_ids) -> np.ndarray:
        """Manifest rows of the given object ids; unknown ids are an error naming them."""
        want = np.asarray(object_ids)
        if want.dtype.kind not in "iu" or want.ndim != 1:
            raise InvalidArgumentError(f"object ids must be a 1-D sequence of integers, got {object_ids!r}")
        ids = await self.ids()
        if self._order is None:
            self._order = np.arange(len(ids)) if np.all(ids[1:] > ids[:-1]) else np.argsort(ids, kind="stable")
        keys = ids[self._order]
        if len(keys):
            pos = np.minimum(np.searchsorted(keys, want), len(keys) - 1)
            ok = keys[pos] == want
        else:
            pos, ok = np.zeros(len(want), np.int64), np.zeros(len(want), bool)
        rows = self._order[pos]
        if not np.all(ok):
            bad = want[~ok][:5].tolist()
            lo_hi = f"{int(ids.min())}..{int(ids.max())}" if len(ids) else "none"
            raise InvalidArgumentError(
                f"object id(s) {bad} not in level {self.level.index} ({self.count} objects, ids {lo_hi})")
        return rows.astype(np.int64)

    # ------------------------------------------------------------- manifests
    async def table(self, rows: np.ndarray) -> ManifestTable:
        """Decoded manifests of ``rows``; ``object_row`` indexes into ``rows``."""
        rows = np.asarray(rows, dtype=np.int64)
        payloads = await (self._sharded(rows) if self.inner is not None else self._plain(rows))
        return decode_manifests(payloads, self.ndim, key=self.manifests.path)

    def _cached(self, cells) -> dict[int, list]:
        """Decoded manifest cells already in the executor's byte-bounded "manifest" cache."""
        found = {}
        for c in cells:
            items = self.ex.get_cached("manifest", (self.manifests.path, c))
            if items is not None:
                found[c] = items
        return found

    def _remember(self, got: dict[int, list], c: int, items: list) -> None:
        got[c] = items
        self.ex.put_cached("manifest", (self.manifests.path, c), items, nbytes=64 + sum(16 + len(x) for x in items))

    async def _plain(self, rows: np.ndarray) -> list:
        per = self.rows_per_chunk
        cells = sorted(set((rows // per).tolist()))
        got = self._cached(cells)
        missing = [c for c in cells if c not in got]
        fetched = await self.ex.gather([self.manifests.items((c,)) for c in missing])
        for c, items in zip(missing, fetched):
            want = min(per, self.count - c * per)
            if items is None:
                items = [b""] * want
            if len(items) < want:
                raise FormatError(f"{self.manifests.key_of((c,))}: {len(items)} manifests, expected {want}")
            self._remember(got, c, list(items))
        return [got[int(r) // per][int(r) % per] for r in rows]

    async def _shard_index(self, shard: int):
        """A shard's index, by one suffix read that brings the whole shard when it is small.

        The suffix asked for is the index or one round trip's worth of bytes
        (latency x bandwidth, at most PREFETCH_LIMIT), whichever is larger: a
        shard that fits comes back whole and is kept raw, so the first object
        read in it needs no manifest request at all.
        """
        key = self.manifests.key_of((shard,))
        n_inner = self.rows_per_chunk // self.inner
        index_size = index_nbytes(n_inner)
        handle = self.ex.handle
        want = max(index_size, min(PREFETCH_LIMIT, int(handle.latency_hint * handle.bandwidth_hint)))
        tail = await self.ex.get_suffix(key, want, cache="shard_index")
        if tail is None:
            return None
        if len(tail) < want and self.ex.get_cached("manifest", (self.manifests.path, "shard", shard)) is None:
            self.ex.put_cached("manifest", (self.manifests.path, "shard", shard), tail)  # the whole shard
        return decode_shard_index(tail[-index_size:], n_inner, key=key)

    async def _sharded(self, rows: np.ndarray) -> list:
        """Inner chunks holding ``rows``: ranged reads, or whole shards when they are small.

        A shard no bigger than latency x bandwidth costs about one round trip
        whole, so it is read once and kept (raw, in the byte-bounded cache):
        later object reads in it need no request, and only the inner chunks
        asked for are ever decoded.
        """
        per, k = self.rows_per_chunk, self.inner
        path = self.manifests.path
        inner_ids = sorted(set((rows // k).tolist()))  # global inner chunk numbers
        got = self._cached(inner_ids)
        todo = [i for i in inner_ids if i not in got]
        shards = sorted({i * k // per for i in todo})
        indexes = dict(zip(shards, await self.ex.gather([self._shard_index(s) for s in shards])))
        handle = self.ex.handle
        break_even = handle.latency_hint * handle.bandwidth_hint
        ranges, which = [], []  # which: ("shard", shard) or ("inner", i)
        raw_shards: dict[int, bytes] = {}
        for shard in shards:
            index = indexes[shard]
            if index is None:
                continue
            offsets, nbytes = index
            present = offsets != EMPTY
            end = int((offsets[present] + nbytes[present]).max()) if present.any() else 0
            if end <= break_even:
                raw = self.ex.get_cached("manifest", (path, "shard", shard))
                if raw is None:
                    ranges.append(ByteRange(self.manifests.key_of((shard,)), 0, end))
                    which.append(("shard", shard))
                else:
                    raw_shards[shard] = raw
                continue
            for i in todo:
                slot = i - shard * (per // k)
                if 0 <= slot < per // k and present[slot]:
                    start = int(offsets[slot])
                    ranges.append(ByteRange(self.manifests.key_of((shard,)), start, start + int(nbytes[slot])))
                    which.append(("inner", i))
        blobs = await self.ex.read_ranges(ranges)
        for (what, n), blob, r in zip(which, blobs, ranges):
            if blob is None or len(blob) != r.end - r.start:
                raise MissingDataError(f"{r.key}: shard is shorter than its index says")
            if what == "shard":
                raw_shards[n] = blob
                self.ex.put_cached("manifest", (path, "shard", n), blob)
            else:
                self._remember(got, n, list(self.manifests.codec.decode_items(blob, key=f"{r.key}[{n}]")))
        for i in todo:
            if i in got:
                continue
            shard = i * k // per
            index, slot = indexes[shard], i - shard * (per // k)
            if shard in raw_shards and index[0][slot] != EMPTY:
                start = int(index[0][slot])
                blob = raw_shards[shard][start:start + int(index[1][slot])]
                self._remember(got, i, list(self.manifests.codec.decode_items(blob, key=f"{path}[{i}]")))
            else:  # absent inner chunk (or shard): empty manifests
                self._remember(got, i, [b""] * k)
        return [got[int(r) // k][int(r) % k] for r in rows]
