"""Level 3, object index: manifests decode and name stored fragments; object ids,
groups and vlen per-object rows agree with the object count.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ..config import tuning
from ..errors import ZvfError
from ..format.keys import format_chunk_id
from ..format.manifest import decode_manifests
from ..format.shard import decode_shard_index
from .model import ArrayInfo, Failed, LevelInfo, ValidatorBase, dense_alloc_bytes, strip_key


class VlenRows(NamedTuple):
    """The stored rows of a 1-D variable-length array."""

    rows: list[int]  # row numbers
    payloads: list[bytes]
    keys: list[str]  # key of the cell holding each row
    missing: int  # rows of the shape no stored cell holds


class ObjectChecks(ValidatorBase):
    """Level 3, object index checks of :class:`zvf.validation.checks.Validator`."""

    async def _object_pass(self, lv: LevelInfo) -> None:
        n = lv.index
        man = lv.array("object_index/manifests")
        ids_arr = lv.array("object_index/object_ids")
        if ids_arr is not None and ids_arr.usable and ids_arr.keys is not None:  # usable arrays have keys
            ids = await self._dense(ids_arr)
            if ids is not None:
                ids = np.asarray(ids).reshape(-1).astype(np.int64)
                lv.object_ids = ids
                d = np.diff(ids)
                if d.size and (d <= 0).any():
                    r = int(np.flatnonzero(d <= 0)[0])
                    what = "repeated" if d[r] == 0 else "unsorted"
                    self.error(3, ids_arr.keys.key(ids_arr.path, (0,)),
                               f"object_ids must be sorted and unique; {what} at rows {r}..{r + 1} "
                               f"({int(ids[r])}, {int(ids[r + 1])})")
        got = await self._vlen_rows(man, "manifest")
        if got is None or man is None or man.keys is None:  # None for an absent or unusable array
            return
        row_no, payloads, cell_of, missing = got
        o = int(man.meta.shape[0])
        if missing:
            first = next(c for c in range(len(man.grid_cells) + 1) if (c,) not in man.grid_cells)
            self.error(3, man.keys.key(man.path, (first,)),
                       f"{missing} of {o} object(s) have no stored manifest (cell missing)")
        sid = self.ndim + (1 if lv.parsed.chunk_dims else 0)
        try:
            table = decode_manifests(payloads, sid, key=f"{man.path}")
        except ZvfError as e:
            self.error(3, f"{man.path}/c/0", f"manifests do not decode: {strip_key(str(e), man.path)}")
            return
        self.counts["objects"] += len(row_no)
        self.counts["manifest_blocks"] += len(table)
        ids = lv.object_ids if lv.object_ids is not None and len(lv.object_ids) == o else None
        oids = np.asarray(row_no, dtype=np.int64) if ids is None else ids[np.asarray(row_no, dtype=np.int64)]
        vert = lv.arrays.get("vertices")
        if not len(table) or (vert is not None and not vert.usable):
            return  # nothing to check against (no manifests, or vertex cells that are not checked)
        uniq, inv = np.unique(table.coords, axis=0, return_inverse=True)
        inv = inv.reshape(-1)
        f_of = np.array([lv.n_frags.get(tuple(c), -1) for c in uniq.tolist()], dtype=np.int64)
        has_v = np.array([tuple(c) in lv.n_rows for c in uniq.tolist()], dtype=bool)
        bad_c = np.array([tuple(c) in lv.bad_chunks for c in uniq.tolist()], dtype=bool)
        fcount = f_of[inv]
        def bad_blocks(mask: np.ndarray, kind: str, says: Callable[[int], str], more: str) -> None:
            """The first ``validation_similar_issues`` manifest blocks ``mask`` flags, at the manifest cell of
            their object (``says(block, object row)`` what is wrong), and a count of the rest."""
            listed = tuning().validation_similar_issues
            for i in np.flatnonzero(mask)[:listed].tolist():
                r = int(table.object_row[i])
                self.error(3, cell_of[r], f"object {int(oids[r])} references {says(i)}", kind=kind)
            if mask.sum() > listed:
                self.error(3, f"{man.path}", f"{int(mask.sum()) - listed} more manifest blocks reference {more}")

        bad_blocks(~has_v[inv] & ~bad_c[inv], "manifest-chunk",
                   lambda i: f"chunk {format_chunk_id(table.coords[i].tolist())}, which holds no vertices",
                   "chunks without vertices")
        bad_blocks(has_v[inv] & (fcount >= 0) & (table.fragment >= fcount), "manifest-fragment",
                   lambda i: f"fragment {int(table.fragment[i])} of chunk {format_chunk_id(table.coords[i].tolist())}"
                             f", which has only {int(fcount[i])} fragments",
                   "fragments past their chunk's count")
        # level 4: at level 0 every fragment belongs to some object (one per object and chunk)
        if self.max_level >= 4 and n == 0 and not lv.parsed.shared_fragments:
            valid = has_v[inv] & (fcount >= 0) & (table.fragment < np.maximum(fcount, 0))
            chunk_ix = inv[valid]
            base = np.concatenate(([0], np.cumsum(np.maximum(f_of, 0))))
            used = np.zeros(int(base[-1]), dtype=bool)
            used[base[chunk_ix] + table.fragment[valid]] = True
            seen = set(map(tuple, uniq.tolist()))
            orphan_chunks = [c for c, f in lv.n_frags.items() if f and c not in seen]
            unused = int((~used).sum()) + sum(lv.n_frags[c] for c in orphan_chunks)
            # empty fragments (count 0) are legitimate only in bin layouts; objects own theirs
            if unused:
                self.warn(4, f"{man.path}", f"{unused} fragment(s) of level {n} belong to no object's manifest")

    async def _vlen_rows(self, info: ArrayInfo | None, what: str) -> VlenRows | None:
        """Stored rows of a 1-D vlen array (plain or sharded: manifests, groups) among 0..shape[0]-1.

        Returns (row numbers, payloads, key of each row, rows missing) or None when the
        array is absent or not checkable (reported elsewhere) or a stored chunk is broken
        (reported).  Only stored chunks are visited, so a corrupted ``shape`` cannot make
        this loop or allocate.
        """
        if info is None or not info.usable or info.codec is None or info.meta.ndim != 1:
            return None
        count = int(info.meta.shape[0])
        per = int(info.meta.chunk_shape[0])
        codec = info.codec
        inner = per if codec.shard is None else (codec.inner_rows or 1)
        rows: list[int] = []
        payloads: list[bytes] = []
        keys: list[str] = []
        n_chunks = -(-count // per) if count else 0
        for (c,), key in sorted(info.grid_cells.items()):
            if c >= n_chunks:
                continue  # reported as outside the grid
            raw = await self._get_or_issue(key, 3)
            if isinstance(raw, Failed) or raw is None:
                return None
            lo = c * per
            try:
                if codec.shard is None:
                    parts = [(lo, raw, key)]
                else:
                    n_inner = max(per // inner, 1)
                    offsets, nbytes = decode_shard_index(raw, n_inner, key=key)
                    parts = [(lo + i * inner, raw[int(offsets[i]):int(offsets[i]) + int(nbytes[i])], f"{key}[{i}]")
                             for i in np.flatnonzero(offsets != np.uint64(2**64 - 1)).tolist()]
                for start, blob, k in parts:
                    want = min(inner, count - start)
                    if want <= 0:
                        continue
                    items = codec.decode_items(blob, key=k)
                    if len(items) < want:
                        self.error(3, key, f"{what} chunk {k} holds {len(items)} rows, expected {want}")
                        return None
                    rows.extend(range(start, start + want))
                    payloads.extend(bytes(x) for x in items[:want])
                    keys.extend([key] * want)
            except ZvfError as e:
                self.error(3, key, f"{what} chunk does not decode: {strip_key(str(e), key)}")
                return None
        return VlenRows(rows, payloads, keys, count - len(rows))

    async def _dense(self, info: ArrayInfo) -> np.ndarray | None:
        """A whole dense array (object ids, attributes) or None when broken (reported)."""
        from ..read.cells import CellArray
        from ..read.dense import read_dense

        nbytes = dense_alloc_bytes(info.meta)
        most = tuning().validation_dense_bytes
        if nbytes > most:
            self.warn(3, f"{info.path}/zarr.json", f"shape {list(info.meta.shape)} is {nbytes} bytes: not read "
                                                   f"(the validator reads dense arrays up to {most} bytes: "
                                                   "zvf.config setting validation_dense_bytes)")
            return None
        try:
            arr = CellArray(self.ex, info.path, info.meta)
            return await read_dense(self.ex, arr)
        except ZvfError as e:
            self.error(3, f"{info.path}/c/0", f"dense array does not decode: {strip_key(str(e), info.path)}",
                       kind="dense")
            return None

    async def _dense_pass(self, lv: LevelInfo) -> None:
        for rel in [f"object_attributes/{a}" for a in lv.named("object_attributes")] + \
                   [f"group_attributes/{a}" for a in lv.named("group_attributes")]:
            info = lv.arrays[rel]
            if info.usable and info.codec is not None:
                await self._dense(info)
        grp = lv.array("groups")
        got = await self._vlen_rows(grp, "groups")
        if got is None or grp is None:  # None for an absent or unusable array
            return
        members: list[np.ndarray] = []
        for i, row, key in zip(*got[:3]):
            if len(row) % 8:
                self.error(3, key, f"group {i} is {len(row)} bytes, not int64 object ids", kind="groups")
                continue
            members.append(np.frombuffer(row, dtype="<i8"))
        if members and lv.object_ids is not None:
            allm = np.concatenate(members)
            unknown = ~np.isin(allm, lv.object_ids)
            if unknown.any():
                self.error(3, f"{grp.path}/c/0", f"{int(unknown.sum())} group member(s) are not object ids "
                                                 f"(e.g. {int(allm[unknown][0])})")
