"""Object manifests: the payload of one ``object_index/manifests`` row.

Layout (little endian)::

    u32 B                                   number of blocks
    B x block:
        i64 chunk_coords[ndim]
        u8  mode
        mode 0 (single):   i64 fragment
        mode 1 (range):    i64 start, i64 count      -> fragments start .. start+count-1
        mode 2 (explicit): u32 n, i64 fragments[n]

Fragment ids are local to the block's chunk (``vertex_fragments`` of that
chunk).  An empty manifest (object absent at this level) is ``u32 0``.

What 0.9.2 writes (checked on every fixture and by black-box writes of
polylines that re-enter a chunk, graphs, meshes, points with ids, and
coarsened pyramid levels): **only mode 0**, one block per referenced
fragment, in the object's own order -- a chunk visited twice yields two
blocks with the same coords.  Its reader accepts modes 1 and 2 too.
:func:`encode_manifests` writes exactly that; :func:`encode_manifest` with
multi-fragment blocks picks mode 1 for an ascending run and mode 2 otherwise.

Decoding is vectorized: manifests whose length equals ``4 + B * (8 ndim + 9)``
with every mode byte 0 are parsed in one numpy pass; any others are walked
block-by-block *across all manifests at once* (one numpy step per block
position, not per block).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import FormatError, InvalidArgumentError
from .vlen import as_u8, byte_records, byte_view, u32_at

if TYPE_CHECKING:
    from .types import BytesLike

_I64 = NDArray[np.int64]

__all__ = [
    "EMPTY_MANIFEST",
    "ManifestTable",
    "decode_manifests",
    "decode_manifests_packed",
    "encode_manifest",
    "encode_manifests",
    "encode_manifests_packed",
]

EMPTY_MANIFEST = b"\x00\x00\x00\x00"
_MAX_FRAGMENT = 1 << 32  # fragment ids index a u32-counted fragment table


@dataclass(frozen=True, eq=False)
class ManifestTable:
    """One row per referenced fragment (modes expanded), in manifest order.

    ``object_row`` is the position of the manifest in the decoded list,
    ``block`` the block's position inside its manifest.
    """

    object_row: np.ndarray
    block: np.ndarray
    coords: np.ndarray
    fragment: np.ndarray
    num_objects: int = 0

    def __len__(self) -> int:
        return int(self.fragment.size)

    @property
    def object_offsets(self) -> np.ndarray:
        """CSR offsets (``num_objects + 1``) of each object's rows."""
        return np.searchsorted(self.object_row, np.arange(self.num_objects + 1), side="left").astype(np.int64)

    @classmethod
    def concat(cls, tables: Sequence[ManifestTable]) -> ManifestTable:
        """The tables of consecutive runs of manifests as one (object rows renumbered in order)."""
        if len(tables) == 1:
            return tables[0]
        counts = np.array([t.num_objects for t in tables], dtype=np.int64)
        firsts = (np.cumsum(counts) - counts).tolist()
        return cls(
            np.concatenate([t.object_row + f for t, f in zip(tables, firsts)]),
            np.concatenate([t.block for t in tables]),
            np.concatenate([t.coords for t in tables]),
            np.concatenate([t.fragment for t in tables]),
            int(counts.sum()),
        )

    def take_objects(self, rows: ArrayLike) -> ManifestTable:
        """Sub-table of the given object rows (renumbered 0..k-1 in the given order)."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if rows.size and (rows.min() < 0 or rows.max() >= self.num_objects):
            raise InvalidArgumentError(f"rows: object row out of range [0, {self.num_objects})")
        off = self.object_offsets
        lens = off[rows + 1] - off[rows]
        total = int(lens.sum())
        firsts = np.cumsum(lens) - lens
        sel = np.repeat(off[rows], lens) + (np.arange(total, dtype=np.int64) - np.repeat(firsts, lens))
        return ManifestTable(
            np.repeat(np.arange(rows.size, dtype=np.int64), lens),
            self.block[sel],
            self.coords[sel],
            self.fragment[sel],
            int(rows.size),
        )


def _read_i64(u8: NDArray[np.uint8], pos: _I64, count: int) -> _I64:
    """``count`` little-endian int64 at each byte position -> (len(pos), count)."""
    if pos.size == 0:
        return np.zeros((0, count), dtype=np.int64)
    return byte_records(u8, np.dtype(("<i8", (count,))))[pos].astype(np.int64).reshape(pos.size, count)


def decode_manifests(
    payloads: Sequence[bytes | bytearray | memoryview], ndim: int, *, key: str = "?", max_refs: int | None = None
) -> ManifestTable:
    """Decode many manifests (bytes-like each) into one :class:`ManifestTable`."""
    n = len(payloads)
    buf = b"".join(payloads)
    lengths = np.fromiter(map(len, payloads), dtype=np.int64, count=n)
    if int(lengths.sum()) != len(buf):  # some item is not a flat byte buffer
        views = [byte_view(p) for p in payloads]
        buf = b"".join(views)
        lengths = np.fromiter((v.nbytes for v in views), dtype=np.int64, count=n)
    starts = np.cumsum(lengths) - lengths
    return decode_manifests_packed(buf, starts, lengths, ndim, key=key, max_refs=max_refs)


def decode_manifests_packed(
    buf: BytesLike, starts: ArrayLike, lengths: ArrayLike, ndim: int, *, key: str = "?", max_refs: int | None = None
) -> ManifestTable:
    """Decode manifests that sit at ``buf[starts[i] : starts[i] + lengths[i]]``.

    Pair with :func:`zvf.format.vlen.decode_vlen_spans` to decode a whole
    manifests chunk without slicing it.  ``max_refs`` bounds the number of
    fragment references mode-1 ranges may expand to (default: generous,
    proportional to the input size) so a tiny blob cannot demand a huge table.
    """
    if ndim < 1:
        raise InvalidArgumentError(f"ndim: must be >= 1, got {ndim}")
    u8 = as_u8(buf)
    starts = np.asarray(starts, dtype=np.int64).reshape(-1)
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    n = starts.size
    if lengths.size != n:
        raise InvalidArgumentError("starts and lengths differ in size")
    if n and (starts.min() < 0 or lengths.min() < 0 or int((starts + lengths).max()) > u8.size):
        raise InvalidArgumentError("starts/lengths: a manifest lies outside buf")
    if max_refs is None:
        max_refs = max(1 << 22, 16 * int(u8.size))
    hdr = 8 * ndim + 1
    bs0 = hdr + 8
    empty = ManifestTable(
        np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, ndim), np.int64), np.zeros(0, np.int64), n
    )
    if n == 0:
        return empty
    short = lengths < 4
    if short.any():
        i = int(np.flatnonzero(short)[0])
        raise FormatError(f"{key}: manifest of object row {i} is {int(lengths[i])} bytes, shorter than its u32 count")
    nblocks = u32_at(u8, starts)
    cap = (lengths - 4) // (hdr + 4)  # smallest block: mode 2 with no fragments
    over = nblocks > cap
    if over.any():
        i = int(np.flatnonzero(over)[0])
        raise FormatError(
            f"{key}: manifest of object row {i} declares {int(nblocks[i])} blocks but its "
            f"{int(lengths[i])} bytes hold at most {int(cap[i])}"
        )
    ends = starts + lengths

    # ---- fast path: all-mode-0 manifests (everything 0.9.2 writes) -------
    uniform = lengths == 4 + nblocks * bs0
    u_rows = np.flatnonzero(uniform)
    u_nb = nblocks[u_rows]
    u_total = int(u_nb.sum())
    u_first = np.cumsum(u_nb) - u_nb  # each uniform manifest's first block among all of theirs
    u_local = np.repeat(np.arange(u_rows.size, dtype=np.int64), u_nb)  # each block's manifest among the uniform
    u_obj = u_local if u_rows.size == n else u_rows[u_local]
    ar = np.arange(u_total, dtype=np.int64)
    u_blk = ar - u_first[u_local]
    # block k of every uniform manifest sits at start + 4 + k * bs0: one gather per field, no records copied
    u_pos = (starts[u_rows] + 4 - bs0 * u_first)[u_local] + bs0 * ar
    mode_bad = u8[u_pos + 8 * ndim] != 0
    u_coords = byte_records(u8, np.dtype(("<i8", (ndim,))))[u_pos].astype(np.int64, copy=False).reshape(-1, ndim)
    u_frag = byte_records(u8, "<i8")[u_pos + hdr].astype(np.int64, copy=False)
    if mode_bad.any():
        uniform[np.unique(u_obj[mode_bad])] = False
        keep_rows = uniform[u_obj]
        u_obj, u_blk, u_coords, u_frag = u_obj[keep_rows], u_blk[keep_rows], u_coords[keep_rows], u_frag[keep_rows]

    s_rows = np.flatnonzero(~uniform)
    if s_rows.size == 0:
        obj, blk, coords, frag = u_obj, u_blk, u_coords, u_frag
    else:
        s_obj, s_blk, s_sub, s_coords, s_frag = _walk(u8, starts, ends, nblocks, s_rows, ndim, key, max_refs)
        obj = np.concatenate((u_obj, s_obj))
        blk = np.concatenate((u_blk, s_blk))
        sub = np.concatenate((np.zeros(u_obj.size, np.int64), s_sub))
        coords = np.concatenate((u_coords, s_coords))
        frag = np.concatenate((u_frag, s_frag))
        order = np.lexsort((sub, blk, obj))
        obj, blk, coords, frag = obj[order], blk[order], coords[order], frag[order]
    neg = frag < 0
    if neg.any():
        j = int(np.flatnonzero(neg)[0])
        raise FormatError(
            f"{key}: manifest of object row {int(obj[j])} block {int(blk[j])} names fragment {int(frag[j])} (< 0)"
        )
    return ManifestTable(obj, blk, coords, frag, n)


def _within_runs(cnt: _I64) -> _I64:
    """0, 1, ..., cnt[i]-1 for each run i, concatenated: each item's place within its own run."""
    return np.arange(int(cnt.sum()), dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)


def _first(mask: NDArray[np.bool_]) -> int:
    return int(np.flatnonzero(mask)[0])


def _walk(
    u8: NDArray[np.uint8], starts: _I64, ends: _I64, nblocks: _I64, rows: _I64, ndim: int, key: str, max_refs: int
) -> tuple[_I64, _I64, _I64, _I64, _I64]:
    """Parse the given manifests block position by block position, all at once."""
    hdr = 8 * ndim + 1
    cur = starts[rows] + 4
    end = ends[rows]
    remaining = nblocks[rows].copy()
    found: list[tuple[_I64, _I64, _I64, _I64, _I64]] = []  # (object row, block, place in block, coords, fragment)
    refs = 0
    j = 0
    act = np.flatnonzero(remaining > 0)
    while act.size:
        c = cur[act]
        e = end[act]
        r = rows[act]

        def fail(i: int, what: str, r: _I64 = r, j: int = j) -> NoReturn:
            raise FormatError(f"{key}: manifest of object row {int(r[i])} block {j}: {what}")

        trunc = c + hdr > e
        if trunc.any():
            fail(_first(trunc), "truncated in the block header")
        coords = _read_i64(u8, c, ndim)
        mode = u8[c + 8 * ndim].astype(np.int64)

        def take(m: _I64, cnt: _I64, within: _I64, frags: _I64, r: _I64 = r, j: int = j,
                 coords: _I64 = coords) -> None:
            """The fragment references of the blocks ``m`` (indices into ``act``), ``cnt`` each."""
            found.append((np.repeat(r[m], cnt), np.full(within.size, j, np.int64), within,
                          np.repeat(coords[m], cnt, axis=0), frags))

        c = c + hdr
        badm = mode > 2
        if badm.any():
            i = _first(badm)
            fail(i, f"unknown mode {int(mode[i])}")
        need = np.where(mode == 0, 8, np.where(mode == 1, 16, 4))
        trunc = c + need > e
        if trunc.any():
            fail(_first(trunc), "truncated in the block payload")
        nxt = c + need
        # mode 0: one fragment
        m0 = np.flatnonzero(mode == 0)
        if m0.size:
            take(m0, np.ones(m0.size, np.int64), np.zeros(m0.size, np.int64), _read_i64(u8, c[m0], 1).reshape(-1))
        # mode 1: a range of fragments (start, count)
        m1 = np.flatnonzero(mode == 1)
        if m1.size:
            sc = _read_i64(u8, c[m1], 2)
            st, cnt = sc[:, 0], sc[:, 1]
            bad = (st < 0) | (cnt < 0) | (st > _MAX_FRAGMENT) | (cnt > _MAX_FRAGMENT - np.minimum(st, _MAX_FRAGMENT))
            if bad.any():
                i = _first(bad)
                fail(i, f"range start {int(st[i])} count {int(cnt[i])} is invalid", r[m1])
            refs += int(cnt.sum())
            if refs > max_refs:
                raise FormatError(
                    f"{key}: manifest ranges expand to more than {max_refs} fragment references "
                    f"(pass max_refs to allow more)"
                )
            within = _within_runs(cnt)
            take(m1, cnt, within, np.repeat(st, cnt) + within)
        # mode 2: an explicit list of fragments (u32 count, i64 each)
        m2 = np.flatnonzero(mode == 2)
        if m2.size:
            cnt = u32_at(u8, c[m2])
            body = c[m2] + 4
            trunc = body + 8 * cnt > e[m2]
            if trunc.any():
                i = _first(trunc)
                fail(i, f"explicit list of {int(cnt[i])} fragments overruns the manifest", r[m2])
            within = _within_runs(cnt)
            take(m2, cnt, within, _read_i64(u8, np.repeat(body, cnt) + 8 * within, 1).reshape(-1))
            nxt[m2] = body + 8 * cnt
        cur[act] = nxt
        remaining[act] -= 1
        act = act[remaining[act] > 0]
        j += 1
    trailing = cur != end
    if trailing.any():
        i = int(np.flatnonzero(trailing)[0])
        raise FormatError(
            f"{key}: manifest of object row {int(rows[i])} has {int(end[i] - cur[i])} trailing bytes "
            f"after {int(nblocks[rows[i]])} blocks"
        )
    if not found:
        z = np.zeros(0, np.int64)
        return z, z, z, np.zeros((0, ndim), np.int64), z
    obj, blk, sub, coords, frag = (np.concatenate(column) for column in zip(*found))
    return obj, blk, sub, coords.reshape(-1, ndim), frag


# ---------------------------------------------------------------------------
# encoding


def _block_dtype(ndim: int) -> np.dtype[Any]:
    """A packed mode-0 block: i64 coords[ndim], u8 mode, i64 fragment."""
    return np.dtype([("c", "<i8", (ndim,)), ("m", "u1"), ("f", "<i8")], align=False)


def _header_mask(total: int, obj_off: _I64) -> NDArray[np.bool_]:
    """True on bytes that are not a manifest's u32 block count."""
    keep = np.ones(total, dtype=bool)
    keep[(obj_off[:-1, None] + np.arange(4)).ravel()] = False
    return keep


def _pack(
    num_objects: int, block_obj: _I64, coords: _I64, ref_off: _I64, refs: _I64
) -> tuple[NDArray[np.uint8], _I64]:
    """Lay out manifests; returns (uint8 buffer, int64 offsets[num_objects + 1])."""
    nb = block_obj.size
    ndim = coords.shape[1]
    nref = np.diff(ref_off)
    per_obj_blocks = np.bincount(block_obj, minlength=num_objects).astype(np.int64)
    if nb == 0 or np.all(nref == 1):
        # every block mode 0 (what 0.9.2 writes): fixed-size blocks, one structured fill
        bs0 = 8 * ndim + 9
        obj_off = np.concatenate(([0], np.cumsum(4 + bs0 * per_obj_blocks))).astype(np.int64)
        blocks = np.empty(nb, dtype=_block_dtype(ndim))
        blocks["c"] = coords
        blocks["m"] = 0
        blocks["f"] = refs[ref_off[:-1]] if nb else 0
        out = np.empty(int(obj_off[-1]), dtype=np.uint8)
        keep = _header_mask(out.size, obj_off)
        out[keep] = blocks.view(np.uint8)
        out[~keep] = per_obj_blocks.astype("<u4").view(np.uint8)
        return out, obj_off
    # mode per block: 1 ref -> 0; ascending run of >1 refs -> 1; else 2
    mode = np.full(nb, 2, dtype=np.int64)
    mode[nref == 1] = 0
    multi = nref > 1
    if multi.any():
        step_bad = np.concatenate(([0], np.cumsum(np.diff(refs) != 1)))
        last = np.where(multi, ref_off[1:] - 1, 0)
        fst = np.where(multi, ref_off[:-1], 0)
        run = multi & (step_bad[last] == step_bad[fst])
        mode[run] = 1
    hdr = 8 * ndim + 1
    payload = np.where(mode == 0, 8, np.where(mode == 1, 16, 4 + 8 * nref))
    bsize = hdr + payload
    per_obj_bytes = 4 + np.bincount(block_obj, weights=bsize, minlength=num_objects).astype(np.int64)
    obj_off = np.concatenate(([0], np.cumsum(per_obj_bytes))).astype(np.int64)
    out = np.zeros(int(obj_off[-1]), dtype=np.uint8)
    # u32 B per object
    out[obj_off[:-1, None] + np.arange(4)] = per_obj_blocks.astype("<u4").view(np.uint8).reshape(-1, 4)
    # block start = object start + 4 + bytes of earlier blocks of the same object
    csum = np.cumsum(bsize) - bsize
    obj_first_block = np.searchsorted(block_obj, np.arange(num_objects))
    bpos = obj_off[block_obj] + 4 + csum - csum[obj_first_block[block_obj]]
    out[bpos[:, None] + np.arange(8 * ndim)] = coords.astype("<i8").view(np.uint8).reshape(nb, 8 * ndim)
    out[bpos + 8 * ndim] = mode.astype(np.uint8)
    p = bpos + hdr
    m0 = mode == 0
    if m0.any():
        out[p[m0][:, None] + np.arange(8)] = refs[ref_off[:-1][m0]].astype("<i8").view(np.uint8).reshape(-1, 8)
    m1 = mode == 1
    if m1.any():
        sc = np.stack((refs[ref_off[:-1][m1]], nref[m1]), axis=1).astype("<i8")
        out[p[m1][:, None] + np.arange(16)] = sc.view(np.uint8).reshape(-1, 16)
    m2 = np.flatnonzero(mode == 2)
    if m2.size:
        out[p[m2][:, None] + np.arange(4)] = nref[m2].astype("<u4").view(np.uint8).reshape(-1, 4)
        cnt = nref[m2]
        tot = int(cnt.sum())
        if tot:
            within = _within_runs(cnt)
            src = np.repeat(ref_off[:-1][m2], cnt) + within
            dst = np.repeat(p[m2] + 4, cnt) + 8 * within
            out[dst[:, None] + np.arange(8)] = refs[src].astype("<i8").view(np.uint8).reshape(-1, 8)
    return out, obj_off


def _check_rows(
    object_row: ArrayLike, coords: ArrayLike, fragment: ArrayLike, num_objects: int
) -> tuple[_I64, _I64, _I64]:
    obj = np.asarray(object_row, dtype=np.int64).reshape(-1)
    frag = np.asarray(fragment, dtype=np.int64).reshape(-1)
    c = np.asarray(coords, dtype=np.int64)
    if c.ndim != 2 or c.shape[0] != obj.size or frag.size != obj.size:
        raise InvalidArgumentError(
            f"coords must be (N, ndim) with N = len(object_row) = len(fragment); got {c.shape}, "
            f"{obj.size}, {frag.size}"
        )
    if obj.size:
        if obj.min() < 0 or obj.max() >= num_objects:
            raise InvalidArgumentError(f"object_row: values must lie in [0, {num_objects})")
        if np.any(np.diff(obj) < 0):
            raise InvalidArgumentError("object_row: rows must be grouped by object in ascending order")
        if frag.min() < 0:
            raise InvalidArgumentError("fragment: fragment ids must be >= 0")
    return obj, c, frag


def encode_manifests_packed(
    object_row: ArrayLike, coords: ArrayLike, fragment: ArrayLike, num_objects: int
) -> tuple[NDArray[np.uint8], _I64]:
    """0.9.2-style manifests for ``num_objects`` objects, one mode-0 block per row.

    Rows (``object_row`` ascending, ``coords`` (N, ndim), ``fragment``) are in
    each object's own order.  Returns the concatenated manifests and their
    ``num_objects + 1`` byte offsets (feed to
    :func:`zvf.format.vlen.encode_vlen_packed`).
    """
    obj, c, frag = _check_rows(object_row, coords, fragment, int(num_objects))
    ref_off = np.arange(obj.size + 1, dtype=np.int64)
    return _pack(int(num_objects), obj, c, ref_off, frag)


def encode_manifests(object_row: ArrayLike, coords: ArrayLike, fragment: ArrayLike, num_objects: int) -> list[bytes]:
    """Like :func:`encode_manifests_packed` but one ``bytes`` per object."""
    data, off = encode_manifests_packed(object_row, coords, fragment, num_objects)
    mv = memoryview(data)  # type: ignore[arg-type]  # numpy's stubs: ndarray.__buffer__ only on Python >= 3.12
    return [mv[a:b].tobytes() for a, b in zip(off[:-1].tolist(), off[1:].tolist())]


def encode_manifest(coords: ArrayLike, fragment_lists: Sequence[ArrayLike]) -> bytes:
    """One object's manifest: block ``i`` names chunk ``coords[i]`` and the fragments ``fragment_lists[i]``.

    A single fragment becomes mode 0 (what 0.9.2 writes), an ascending run
    mode 1, anything else (including an empty list) mode 2.
    """
    c = np.asarray(coords, dtype=np.int64)
    if c.ndim != 2 or c.shape[0] != len(fragment_lists):
        raise InvalidArgumentError(
            f"coords must be (B, ndim) with B = len(fragment_lists) = {len(fragment_lists)}; got {c.shape}"
        )
    ndim = c.shape[1]
    cpack = struct.Struct(f"<{ndim}q").pack
    parts = [struct.pack("<I", c.shape[0])]
    for row, frags in zip(c.tolist(), fragment_lists):  # per block of one object
        f = np.asarray(frags, dtype=np.int64).reshape(-1)
        if f.size and f.min() < 0:
            raise InvalidArgumentError("fragment_lists: fragment ids must be >= 0")
        parts.append(cpack(*row))
        if f.size == 1:
            parts.append(struct.pack("<Bq", 0, int(f[0])))
        elif f.size > 1 and bool(np.all(np.diff(f) == 1)):
            parts.append(struct.pack("<Bqq", 1, int(f[0]), int(f.size)))
        else:
            parts.append(struct.pack("<BI", 2, int(f.size)))
            parts.append(f.astype("<i8").tobytes())
    return b"".join(parts)
