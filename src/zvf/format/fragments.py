"""The v1 fragment index (``vertex_fragments`` / ``link_fragments`` cell payload).

Byte layout (little endian), as zarr-vectors 0.9.2 writes it::

    u32 magic = 0x5A564647   (the bytes b"GFVZ" on disk)
    u16 version = 1
    u16 flags = 0
    u32 F                    number of fragments
    u32 R                    number of range fragments (= popcount of the bitmap)
    u8  bitmap[ceil(F/8)]    bit f (LSB-first) set <=> fragment f is a range,
                             zero-padded to the next multiple of 8 bytes
    R x (i64 start, i64 count)           range fragments in fragment order
    u32 explicit_offsets[E+1]            E = F - R, CSR offsets, [0] = 0
    i64 explicit_indices[T]              T = explicit_offsets[E]

Facts checked against 0.9.2 (its fixtures and its encoder's output):

* ``explicit_offsets`` is written even when E = 0 (the 4 bytes ``00000000``),
  so an all-range index of F fragments is ``16 + pad8(ceil(F/8)) + 16 R + 4``
  bytes -- not a multiple of 8.
* F = 0 is the 16-byte header alone (no bitmap, no offsets).  Decoding also
  accepts the 20-byte form with ``explicit_offsets = [0]``.
* Padding bits/bytes of the bitmap are written as zero and ignored on read.
* Fragment arrays equal to ``arange(s, s + n)`` with ``s >= 0, n >= 1`` are
  stored as ranges; empty row lists stay explicit (``from_lists`` mirrors this).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..config import tuning
from ..errors import FormatError, InvalidArgumentError, MissingDataError
from .vlen import as_u8

if TYPE_CHECKING:
    from .types import BytesLike

__all__ = [
    "FRAGMENT_MAGIC",
    "FRAGMENT_VERSION",
    "MAX_CELL_ROWS",
    "FragmentIndex",
    "decode_fragment_index",
    "encode_fragment_index",
    "tiling_counts",
]

FRAGMENT_MAGIC = 0x5A564647
FRAGMENT_VERSION = 1
_HEADER = struct.Struct("<IHHII")
#: Rows of one cell are bounded by its u32-length vlen item (>= 1 byte per row).
MAX_CELL_ROWS = (1 << 32) - 1


def _bitmap_nbytes(f: int) -> int:
    return (((f + 7) // 8) + 7) & ~7


def _i64(a: ArrayLike, name: str) -> NDArray[np.int64]:
    arr = np.asarray(a)
    if arr.dtype.kind not in "iu" and not (arr.size == 0):
        raise InvalidArgumentError(f"{name}: expected integers, got dtype {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.int64).reshape(-1)



def _within(lengths: NDArray[np.int64], total: int) -> NDArray[np.int64]:
    """Position of each output element inside its segment."""
    firsts = np.cumsum(lengths) - lengths
    return np.arange(total, dtype=np.int64) - np.repeat(firsts, lengths)


@dataclass(frozen=True, eq=False)
class FragmentIndex:
    """A decoded fragment index: F fragments, each a row range or an explicit row list.

    ``starts``/``counts`` are per fragment (explicit fragments: start 0, count =
    list length); explicit lists live in CSR form over the explicit fragments
    only, in fragment order.
    """

    is_range: np.ndarray
    starts: np.ndarray
    counts: np.ndarray
    explicit_offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    explicit_indices: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: rows of the chunk when known (set by ``decode_fragment_index(n_rows=...)``)
    n_rows: int | None = None
    # derived: per fragment, where its rows come from (range start or CSR offset)
    _base: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        is_range = np.ascontiguousarray(self.is_range, dtype=bool).reshape(-1)
        starts = _i64(self.starts, "starts")
        counts = _i64(self.counts, "counts")
        eoff = _i64(self.explicit_offsets, "explicit_offsets")
        eidx = _i64(self.explicit_indices, "explicit_indices")
        f = is_range.size
        if starts.size != f or counts.size != f:
            raise InvalidArgumentError(
                f"FragmentIndex: is_range, starts, counts lengths differ ({f}, {starts.size}, {counts.size})"
            )
        explicit = ~is_range
        e = int(explicit.sum())
        if eoff.size != e + 1 or eoff[0] != 0 or eoff[-1] != eidx.size:
            raise InvalidArgumentError(
                f"FragmentIndex: explicit_offsets must have {e + 1} entries from 0 to {eidx.size}"
            )
        if e and not np.array_equal(np.diff(eoff), counts[explicit]):
            raise InvalidArgumentError("FragmentIndex: counts of explicit fragments must match explicit_offsets")
        base = starts.copy()
        if e:
            base[explicit] = eoff[:-1]
        for name, val in (
            ("is_range", is_range),
            ("starts", starts),
            ("counts", counts),
            ("explicit_offsets", eoff),
            ("explicit_indices", eidx),
            ("_base", base),
        ):
            object.__setattr__(self, name, val)

    # -- construction -------------------------------------------------------

    @classmethod
    def from_ranges(cls, starts: ArrayLike, counts: ArrayLike) -> FragmentIndex:
        """All-range index (what level-0 writers produce)."""
        s = _i64(starts, "starts")
        c = _i64(counts, "counts")
        if s.size != c.size:
            raise InvalidArgumentError(f"from_ranges: {s.size} starts but {c.size} counts")
        if s.size and (s.min() < 0 or c.min() < 0):
            raise InvalidArgumentError("from_ranges: starts and counts must be >= 0")
        return cls(np.ones(s.size, dtype=bool), s, c)

    @classmethod
    def from_csr(cls, offsets: ArrayLike, indices: ArrayLike, *, detect_ranges: bool = True) -> FragmentIndex:
        """Every fragment given as a row list in CSR form (``offsets`` F+1, ``indices`` T).

        With ``detect_ranges`` (0.9.2's encoder default) a list equal to
        ``arange(s, s+n)``, ``s >= 0, n >= 1`` becomes a range fragment.
        """
        off = _i64(offsets, "offsets")
        idx = _i64(indices, "indices")
        if off.size < 1 or off[0] != 0 or off[-1] != idx.size or np.any(np.diff(off) < 0):
            raise InvalidArgumentError("from_csr: offsets must rise from 0 to len(indices)")
        if idx.size and idx.min() < 0:
            raise InvalidArgumentError("from_csr: row indices must be >= 0")
        f = off.size - 1
        lens = np.diff(off)
        if detect_ranges and f:
            step_bad = np.concatenate(([0], np.cumsum(np.diff(idx) != 1)))
            nonempty = lens > 0
            last = np.where(nonempty, off[1:] - 1, 0)
            first = np.where(nonempty, off[:-1], 0)
            is_range = nonempty & (step_bad[last] == step_bad[first]) if idx.size else nonempty
        else:
            is_range = np.zeros(f, dtype=bool)
        starts = np.zeros(f, dtype=np.int64)
        if is_range.any():
            starts[is_range] = idx[off[:-1][is_range]]
        keep = np.repeat(~is_range, lens)
        e_lens = lens[~is_range]
        e_off = np.concatenate(([0], np.cumsum(e_lens))).astype(np.int64)
        return cls(is_range, starts, lens, e_off, idx[keep])

    @classmethod
    def from_lists(
        cls,
        fragments: Sequence[ArrayLike | tuple[int, int] | None],
        starts: ArrayLike | None = None,
        counts: ArrayLike | None = None,
        *,
        detect_ranges: bool = True,
    ) -> FragmentIndex:
        """Mixed index from a list: per fragment a row array (explicit, or a range when
        ``detect_ranges`` finds an arange), a ``(start, count)`` tuple, or ``None``
        meaning the range ``(starts[i], counts[i])``.
        """
        f = len(fragments)
        s_in = None if starts is None else _i64(starts, "starts")
        c_in = None if counts is None else _i64(counts, "counts")
        forced = np.zeros(f, dtype=bool)
        r_start = np.zeros(f, dtype=np.int64)
        r_count = np.zeros(f, dtype=np.int64)
        arrays: list[np.ndarray] = []
        lens = np.zeros(f, dtype=np.int64)
        for i, frag in enumerate(fragments):  # per fragment, not per row
            if frag is None:
                if s_in is None or c_in is None or i >= s_in.size or i >= c_in.size:
                    raise InvalidArgumentError(f"from_lists: fragment {i} is None but no starts/counts given for it")
                forced[i] = True
                r_start[i], r_count[i] = s_in[i], c_in[i]
            elif isinstance(frag, tuple):
                if len(frag) != 2:
                    raise InvalidArgumentError(f"from_lists: fragment {i} tuple must be (start, count)")
                forced[i] = True
                r_start[i], r_count[i] = int(frag[0]), int(frag[1])
            else:
                a = _i64(frag, f"fragments[{i}]")
                arrays.append(a)
                lens[i] = a.size
        if forced.any() and (r_start[forced].min() < 0 or r_count[forced].min() < 0):
            raise InvalidArgumentError("from_lists: range starts and counts must be >= 0")
        idx = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
        sub = cls.from_csr(
            np.concatenate(([0], np.cumsum(lens[~forced]))), idx, detect_ranges=detect_ranges
        )
        is_range = forced.copy()
        is_range[~forced] = sub.is_range
        st = r_start
        ct = r_count
        st[~forced] = sub.starts
        ct[~forced] = sub.counts
        return cls(is_range, st, ct, sub.explicit_offsets, sub.explicit_indices)

    # -- queries ------------------------------------------------------------

    @property
    def num_fragments(self) -> int:
        return int(self.is_range.size)

    @property
    def num_range(self) -> int:
        return int(self.is_range.sum())

    def __len__(self) -> int:
        return self.num_fragments

    def equals(self, other: FragmentIndex) -> bool:
        return (
            np.array_equal(self.is_range, other.is_range)
            and np.array_equal(self.starts, other.starts)
            and np.array_equal(self.counts, other.counts)
            and np.array_equal(self.explicit_offsets, other.explicit_offsets)
            and np.array_equal(self.explicit_indices, other.explicit_indices)
        )

    def _check_ids(self, fragment_ids: ArrayLike, key: str) -> NDArray[np.int64]:
        ids = np.asarray(fragment_ids)
        if ids.dtype.kind not in "iu" and ids.size:
            raise InvalidArgumentError(f"{key}: fragment ids must be integers, got {ids.dtype}")
        ids = ids.astype(np.int64, copy=False).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_fragments):
            bad = ids[(ids < 0) | (ids >= self.num_fragments)][0]
            raise MissingDataError(
                f"{key}: fragment {int(bad)} requested but the chunk has {self.num_fragments} fragments"
            )
        return ids

    def gather(self, fragment_ids: ArrayLike, *, key: str = "?") -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Rows of the given fragments, concatenated in request order, and per-fragment lengths."""
        ids = self._check_ids(fragment_ids, key)
        lengths = self.counts[ids]
        total = int(lengths.sum())
        if total > tuning().max_gather_rows and (self.n_rows is None or total > ids.size * max(self.n_rows, 1)):
            raise FormatError(
                f"{key}: fragments expand to {total} rows; decode the index with n_rows to read this much"
            )
        rows = np.repeat(self._base[ids], lengths) + _within(lengths, total)
        if self.explicit_indices.size:
            expl = np.repeat(~self.is_range[ids], lengths)
            if expl.any():
                rows[expl] = self.explicit_indices[rows[expl]]
        return rows, lengths

    def spans(self, fragment_ids: ArrayLike, *, key: str = "?") -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Sorted, merged half-open row spans ``[starts, stops)`` covering the fragments.

        Touching and overlapping spans merge, so each span is one byte range
        of an uncompressed cell.  (No ``np.unique``: numpy 2.4's imports ``numpy.ma``, ~15 ms of a
        cold process's first query.)
        """
        wanted = np.zeros(self.num_fragments, dtype=bool)
        wanted[self._check_ids(fragment_ids, key)] = True
        ids = np.flatnonzero(wanted)
        rng = ids[self.is_range[ids]]
        rng = rng[self.counts[rng] > 0]
        s = self.starts[rng]
        e = s + self.counts[rng]
        exp = ids[~self.is_range[ids]]
        if exp.size:
            rows, _ = self.gather(exp, key=key)  # rows repeated between fragments merge below
            s = np.concatenate((s, rows))
            e = np.concatenate((e, rows + 1))
        if s.size == 0:
            z = np.zeros(0, dtype=np.int64)
            return z, z.copy()
        order = np.argsort(s, kind="stable")
        s = s[order]
        e = e[order]
        reach = np.maximum.accumulate(e)
        new = np.ones(s.size, dtype=bool)
        new[1:] = s[1:] > reach[:-1]
        first = np.flatnonzero(new)
        return s[first], np.maximum.reduceat(e, first)

    def max_row(self) -> int:
        """Largest row referenced by any fragment, -1 when none."""
        m = -1
        nz = self.is_range & (self.counts > 0)
        if nz.any():
            m = int((self.starts[nz] + self.counts[nz]).max()) - 1
        if self.explicit_indices.size:
            m = max(m, int(self.explicit_indices.max()))
        return m

    def tiles(self, n_rows: int) -> bool:
        """True when the fragments are ranges that cover ``[0, n_rows)`` back to back in order."""
        if not self.is_range.all():
            return False
        if self.num_fragments == 0:
            return n_rows == 0
        ends = self.starts + self.counts
        return bool(
            self.starts[0] == 0 and np.array_equal(self.starts[1:], ends[:-1]) and ends[-1] == n_rows
        )


def encode_fragment_index(fi: FragmentIndex) -> bytes:
    """Serialize ``fi`` byte-for-byte as 0.9.2 does."""
    f = fi.num_fragments
    r = fi.num_range
    if f >= 1 << 32:
        raise InvalidArgumentError(f"fragment index: {f} fragments exceed the u32 header field")
    header = _HEADER.pack(FRAGMENT_MAGIC, FRAGMENT_VERSION, 0, f, r)
    if f == 0:
        return header
    if fi.explicit_indices.size >= 1 << 32:
        raise InvalidArgumentError("fragment index: explicit rows exceed the u32 offsets")
    bitmap = np.zeros(_bitmap_nbytes(f), dtype=np.uint8)
    packed = np.packbits(fi.is_range, bitorder="little")
    bitmap[: packed.size] = packed
    table = np.empty((r, 2), dtype="<i8")
    table[:, 0] = fi.starts[fi.is_range]
    table[:, 1] = fi.counts[fi.is_range]
    return b"".join(
        (
            header,
            bitmap.tobytes(),
            table.tobytes(),
            fi.explicit_offsets.astype("<u4").tobytes(),
            fi.explicit_indices.astype("<i8").tobytes(),
        )
    )


def _range_table(u8: NDArray[np.uint8], f: int, bl: int) -> NDArray[np.int64] | None:
    """The (F, 2) table of an all-range index (what writers produce for every level-0 chunk), checked in a
    few whole-array steps; None when any check fails, so the full parser names the defect."""
    full, rest = divmod(f, 8)
    low_bits = (1 << rest) - 1  # the last byte's bits that name fragments
    if (full and int(u8[16:16 + full].min()) != 0xFF) or int(u8[16 + full]) & low_bits != low_bits:
        return None
    if int(u8[-4:].view("<u4")[0]) != 0:  # explicit_offsets == [0]
        return None
    table = np.frombuffer(u8, dtype="<i8", count=2 * f, offset=16 + bl).reshape(f, 2)
    if int(table.min()) < 0 or int(table.max()) > MAX_CELL_ROWS:
        return None
    return table


def _all_ranges(u8: NDArray[np.uint8], f: int, bl: int, n_rows: int | None) -> FragmentIndex | None:
    """:func:`_range_table` as a FragmentIndex (a large share of a full read's per-chunk work otherwise)."""
    table = _range_table(u8, f, bl)
    if table is None:
        return None
    starts = table[:, 0].astype(np.int64)
    counts = table[:, 1].astype(np.int64)
    ends = starts + counts
    if int(ends.max()) > MAX_CELL_ROWS or (n_rows is not None and bool(((ends > n_rows) & (counts > 0)).any())):
        return None
    return FragmentIndex(np.ones(f, dtype=bool), starts, counts, n_rows=None if n_rows is None else int(n_rows))


def tiling_counts(buf: BytesLike, n_rows: int) -> NDArray[np.int64] | None:
    """Row count of each fragment when the index is all ranges covering ``[0, n_rows)`` back to back in
    order -- how every level-0 chunk is written, and all a whole-chunk labelling needs; None otherwise
    (then :func:`decode_fragment_index` parses it, naming any defect)."""
    u8 = as_u8(buf)
    if u8.size < _HEADER.size:
        return None
    magic, version, flags, f, r = _HEADER.unpack_from(u8[:16].tobytes())
    if magic != FRAGMENT_MAGIC or version != FRAGMENT_VERSION or flags or r != f or f == 0:
        return None
    bl = _bitmap_nbytes(f)
    if u8.size != 16 + bl + 16 * f + 4:
        return None
    table = _range_table(u8, f, bl)
    if table is None:
        return None
    counts = table[:, 1].astype(np.int64)
    ends = np.cumsum(counts)
    if int(ends[-1]) != n_rows or int(table[0, 0]) != 0 or not np.array_equal(table[1:, 0], ends[:-1]):
        return None
    return counts


def decode_fragment_index(buf: BytesLike, *, key: str = "?", n_rows: int | None = None) -> FragmentIndex:
    """Parse and validate a fragment index; with ``n_rows`` every row must be < ``n_rows``."""
    u8 = as_u8(buf)
    size = u8.size
    if size < _HEADER.size:
        raise FormatError(f"{key}: fragment index is {size} bytes, shorter than its 16-byte header")
    magic, version, flags, f, r = _HEADER.unpack_from(u8[:16].tobytes())
    if magic != FRAGMENT_MAGIC:
        raise FormatError(
            f"{key}: not a fragment index (magic 0x{magic:08X}, expected 0x{FRAGMENT_MAGIC:08X} 'GFVZ')"
        )
    if version != FRAGMENT_VERSION:
        raise FormatError(f"{key}: fragment index version {version} is not supported (only {FRAGMENT_VERSION})")
    if flags != 0:
        raise FormatError(f"{key}: fragment index flags 0x{flags:04X} are not supported (expected 0)")
    if r > f:
        raise FormatError(f"{key}: fragment index declares {r} range fragments but only {f} fragments")
    if f == 0:
        if size == 16 or (size == 20 and not u8[16:20].any()):
            return FragmentIndex(np.zeros(0, bool), np.zeros(0, np.int64), np.zeros(0, np.int64))
        raise FormatError(f"{key}: empty fragment index has {size - 16} unexpected trailing bytes")
    e = f - r
    bl = _bitmap_nbytes(f)
    fixed = 16 + bl + 16 * r + 4 * (e + 1)
    if fixed > size:
        raise FormatError(
            f"{key}: fragment index declares F={f}, R={r} needing at least {fixed} bytes, blob has {size}"
        )
    if e == 0 and fixed == size:
        fast = _all_ranges(u8, f, bl, n_rows)
        if fast is not None:
            return fast
    is_range = np.unpackbits(u8[16 : 16 + (f + 7) // 8], count=f, bitorder="little").astype(bool)
    pop = int(is_range.sum())
    if pop != r:
        raise FormatError(f"{key}: fragment index bitmap marks {pop} ranges but the header says R={r}")
    pos = 16 + bl
    table = np.frombuffer(u8, dtype="<i8", count=2 * r, offset=pos).reshape(r, 2).astype(np.int64)
    pos += 16 * r
    eoff = np.frombuffer(u8, dtype="<u4", count=e + 1, offset=pos).astype(np.int64)
    pos += 4 * (e + 1)
    if eoff[0] != 0:
        raise FormatError(f"{key}: fragment index explicit_offsets[0] is {int(eoff[0])}, expected 0")
    lens = np.diff(eoff)
    if lens.size and lens.min() < 0:
        k = int(np.flatnonzero(lens < 0)[0])
        raise FormatError(f"{key}: fragment index explicit_offsets decrease at explicit fragment {k}")
    t = int(eoff[-1])
    if pos + 8 * t != size:
        raise FormatError(
            f"{key}: fragment index declares {t} explicit rows ({8 * t} bytes) but "
            f"{size - pos} bytes follow the offsets"
        )
    idx = np.frombuffer(u8, dtype="<i8", count=t, offset=pos).astype(np.int64)
    frag_ids = np.arange(f, dtype=np.int64)
    rng_ids = frag_ids[is_range]
    if r:
        starts_r, counts_r = table[:, 0], table[:, 1]
        bad = (starts_r < 0) | (counts_r < 0)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise FormatError(
                f"{key}: range fragment {int(rng_ids[k])} has start {int(starts_r[k])}, count "
                f"{int(counts_r[k])} (must be >= 0)"
            )
        over = (starts_r > MAX_CELL_ROWS) | (counts_r > MAX_CELL_ROWS - np.minimum(starts_r, MAX_CELL_ROWS))
        if over.any():
            k = int(np.flatnonzero(over)[0])
            raise FormatError(
                f"{key}: range fragment {int(rng_ids[k])} [{int(starts_r[k])}, +{int(counts_r[k])}) exceeds "
                f"the {MAX_CELL_ROWS} rows a cell can hold"
            )
    if t and idx.min() < 0:
        raise FormatError(f"{key}: explicit fragment row {int(idx.min())} is negative")
    if t and idx.max() >= MAX_CELL_ROWS:
        raise FormatError(f"{key}: explicit fragment row {int(idx.max())} exceeds the rows a cell can hold")
    starts = np.zeros(f, dtype=np.int64)
    counts = np.zeros(f, dtype=np.int64)
    starts[is_range] = table[:, 0]
    counts[is_range] = table[:, 1]
    counts[~is_range] = lens
    if n_rows is not None:
        n = int(n_rows)
        if r:
            ends = table[:, 0] + table[:, 1]
            bad = (ends > n) & (table[:, 1] > 0)  # empty ranges cannot overrun
            if bad.any():
                k = int(np.flatnonzero(bad)[0])
                raise FormatError(
                    f"{key}: range fragment {int(rng_ids[k])} [{int(table[k, 0])}, {int(ends[k])}) "
                    f"past the chunk's {n} rows"
                )
        if t and idx.max() >= n:
            j = int(np.flatnonzero(idx >= n)[0])
            e_rank = int(np.searchsorted(eoff, j, side="right")) - 1
            frag = int(frag_ids[~is_range][e_rank])
            raise FormatError(
                f"{key}: explicit fragment {frag} row {int(idx[j])} past the chunk's {n} rows"
            )
    return FragmentIndex(is_range, starts, counts, eoff, idx, None if n_rows is None else int(n_rows))
