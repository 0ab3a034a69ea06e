"""Reading stored cells for the level 3 passes: shard indexes (one read per shard) and decoded
payloads, each failure reported once as an issue."""

from __future__ import annotations

import numpy as np

from ..errors import ZvfError
from ..format.seekable import SeekTable
from ..format.shard import decode_shard_index, index_nbytes
from .model import FAILED, ArrayInfo, Failed, ShardIndex, ValidatorBase, strip_key


class CellReads(ValidatorBase):
    """The cell reads every level 3 pass shares."""

    async def _shard_index(self, shard: tuple[int, ...], shard_key: str) -> ShardIndex | Failed | None:
        """(offsets, nbytes) of one shard of ``shard`` inner chunks, FAILED (reported) or None if absent."""
        if shard_key in self._shard_cache:
            return self._shard_cache[shard_key]
        n_inner = int(np.prod(shard))
        size = self.sizes.get(shard_key)
        if size is None:
            return None
        res: ShardIndex | Failed | None
        try:
            tail = await self.ex.get_suffix(shard_key, index_nbytes(n_inner))
            res = None if tail is None else decode_shard_index(tail, n_inner, key=shard_key, shard_size=size)
        except ZvfError as e:
            self.error(3, shard_key, strip_key(str(e), shard_key), kind="shard")
            res = FAILED
        self._shard_cache[shard_key] = res
        return res

    async def _payload(self, info: ArrayInfo | None, chunk: tuple[int, ...]) -> bytes | Failed | None:
        """Decoded payload of a stored cell; None when not stored; FAILED when broken (reported)."""
        if info is None or not info.usable or info.present is None or chunk not in info.present:
            return None
        codec, origin, keys = info.codec, info.origin, info.keys
        if codec is None or origin is None or keys is None:  # such arrays have no present cells
            return None
        key = info.cell_key(chunk)
        try:
            if codec.shard is None:
                raw = await self.ex.get(key)
                if raw is None:
                    self.error(3, key, "cell vanished while validating", kind="read")
                    return FAILED
                return self._decoded(info, raw, key)
            grid = tuple(int(c) - int(o) for c, o in zip(chunk, origin))
            per = codec.shard
            shard = tuple(g // s for g, s in zip(grid, per))
            skey = keys.key(info.path, shard)
            res = await self._shard_index(per, skey)
            if res is None or isinstance(res, Failed):
                return FAILED
            offsets, nbytes = res
            slot = int(np.ravel_multi_index(tuple(g - s * p for g, s, p in zip(grid, shard, per)), per))
            start, n = int(offsets[slot]), int(nbytes[slot])
            raw = await self.ex.get_range(skey, start, start + n)
            if raw is None or len(raw) != n:
                self.error(3, key, "inner chunk shorter than its shard index says", kind="decode")
                return FAILED
            return self._decoded(info, raw, key)
        except ZvfError as e:
            self.error(3, key, f"cell does not decode: {strip_key(str(e), key)}", kind="decode")
            return FAILED

    @staticmethod
    def _decoded(info: ArrayInfo, raw: bytes | memoryview, key: str) -> bytes:
        """A stored cell decoded; a seekable vertices cell's frame bounds checked against its rows (a bound
        leaving a row out would make box queries skip it)."""
        assert info.codec is not None  # _payload reads cells of arrays with a codec only
        payload = info.codec.decode(raw, key=key)
        raw_rows = info.codec.serializer == "vlen-bytes" and info.attrs.get("encoding", "raw") == "raw"
        if info.zv == "vertices" and raw_rows:
            table = SeekTable.parse(raw, key=key, max_frames=len(raw))
            if isinstance(table, SeekTable):
                table.check_bounds(payload, np.dtype(info.attrs.get("dtype", "float32")), key=key)
        return payload
