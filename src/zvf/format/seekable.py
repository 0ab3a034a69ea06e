"""Compressed cells readable in parts: zstd frames of rows, their bounds, then a seek table (zstd's
"seekable format").

A point-cloud cell without object ids holds its rows sorted by bin (one range fragment per bin,
``fragments_tile``); inside a bin zvf orders them by compact pieces (:func:`bin_pieces`, a k-d tree), so
a frame of a bin's rows covers a small box of it.  zvf writes such a zstd cell as a sequence of ordinary
zstd frames (:func:`frame_cuts`: runs of small bins, or of pieces of a large one; the first frame also holds
the 8-byte vlen header), then, for ``vertices``, a skippable frame with each frame's bounding box
(:func:`frame_bounds_bytes`), then a skippable frame holding the seek table, in the layout of zstd's
seekable format (little endian)::

    u32 0x184D2A5E                skippable frame magic
    u32 8 * n + 9                 bytes of the rest of this frame
    n x (u32 compressed size, u32 decompressed size)
    u32 n                         number of frames
    u8  descriptor                0 (no per-frame checksums; zvf reads only that form)
    u32 0x8F92EAB1                seekable magic

The bounds frame is the table's last entry, listed with 0 decompressed bytes (it holds no rows)::

    u32 0x184D2A5D                skippable frame magic
    u32 16 + 16 * d + 4 * d * m   bytes of the rest of this frame (m data frames, d axes)
    u8[4] "ZVFB", u32 m, u32 d, u32 0 (reserved)
    f64 lo[d], f64 hi[d]          the cell's rows' bounding box
    u16 lo[m][d], u16 hi[m][d]    each frame's box on 65535 steps of the cell's: floor, ceil
                                  (0 and 65535 stand for "unbounded")

Every zstd decoder (numcodecs, zarr-python, 0.9.2) decodes a frame sequence to the concatenation of
its frames and skips skippable frames, so the cell means what a one-frame cell means.  A reader that
knows the cell's end reads the table (and the bounds) from there, then range-reads only the frames
holding the rows it wants -- of a box, only frames whose bounds meet it.  This module is the byte
layout only (no I/O).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from ..errors import FormatError, InvalidArgumentError
from .codecs import SEEK_TABLE_MAGIC, SEEKABLE_MAGIC, CellCodec, zstd_decompress_many
from .vlen import VLEN_HEADER, byte_view, encode_vlen

if TYPE_CHECKING:
    from .types import BytesLike

__all__ = ["SEEK_FOOTER", "SeekTable", "bin_pieces", "decode_frames", "encode_seekable", "frame_bounds_bytes",
           "frame_bounds_size", "frame_cuts", "seek_table_bytes", "seek_table_size", "seekable_codec"]

BOUNDS_MAGIC = 0x184D2A5D  # the skippable frame of per-frame bounds
_BOUNDS_TAG = b"ZVFB"
_BOUNDS_HEAD = struct.Struct("<II4sIII")  # magic, size, tag, frames, axes, reserved
_STEPS = 65535  # a frame's bounds are u16 steps of its cell's box
MAX_BOUND_AXES = 32  # axes a bounds frame may declare (a read allocates per frame and axis)
#: Bytes of the footer (u32 frames, u8 descriptor, u32 magic) ending every seekable cell.
SEEK_FOOTER = 9
_HEAD = 8  # skippable magic + frame size
_ENTRY = 8  # u32 compressed, u32 decompressed
_FOOTER = struct.Struct("<IBI")


def seek_table_size(frames: int) -> int:
    """Bytes of the seek table of a cell of ``frames`` frames."""
    return _HEAD + _ENTRY * frames + SEEK_FOOTER


def seek_table_bytes(compressed: Sequence[int], decompressed: Sequence[int]) -> bytes:
    """The skippable frame ending a seekable cell whose frames have these sizes."""
    n = len(compressed)
    entries = np.empty((n, 2), dtype="<u4")
    entries[:, 0] = compressed
    entries[:, 1] = decompressed
    return struct.pack("<II", SEEK_TABLE_MAGIC, _ENTRY * n + SEEK_FOOTER) + entries.tobytes() + _FOOTER.pack(
        n, 0, SEEKABLE_MAGIC)


def seekable_codec(codec: CellCodec) -> bool:
    """Whether cells of ``codec`` can be written seekable: vlen-bytes, then zstd alone."""
    return codec.serializer == "vlen-bytes" and len(codec.compressors) == 1 and \
        codec.compressors[0][0] in ("zstd", "numcodecs.zstd")


def encode_seekable(codec: CellCodec, payload: BytesLike, cuts: Sequence[int] | NDArray[np.int64],
                    row_bytes: int, bounds: bytes | None = None) -> bytes:
    """One cell payload as zstd frames of rows ``cuts[i]:cuts[i + 1]`` (the first with the vlen header),
    then ``bounds`` (:func:`frame_bounds_bytes` of the same cuts), then the seek table (see the module
    docstring)."""
    if not seekable_codec(codec):
        raise InvalidArgumentError("encode_seekable: the cell's codecs are not vlen-bytes + zstd")
    framed = memoryview(encode_vlen([payload]))
    ends = [0, *(VLEN_HEADER + int(c) * row_bytes for c in cuts[1:-1]), framed.nbytes]
    frames = [codec.compress(framed[a:b]) for a, b in pairwise(ends)]
    decompressed = np.diff(ends).tolist()
    if bounds is not None:
        frames.append(bounds)
        decompressed.append(0)
    return b"".join([*frames, seek_table_bytes([len(f) for f in frames], decompressed)])


def frame_bounds_size(frames: int, axes: int) -> int:
    """Bytes of the bounds frame of ``frames`` frames of ``axes``-dimensional rows."""
    return _BOUNDS_HEAD.size + 16 * axes + 4 * axes * frames


def frame_bounds_bytes(positions: NDArray[np.floating] | NDArray[np.integer], cuts: Sequence[int] | NDArray[np.int64]
                       ) -> bytes | None:
    """The skippable frame of the bounds of frames ``cuts[i]:cuts[i + 1]`` of a cell's (N, d) ``positions``
    (rows in the cell's order): each frame's box on u16 steps of the cell's box, rounded outwards.  None when
    a coordinate is not finite (no bounds: a reader reads the cell's frames by bins alone)."""
    pos = np.asarray(positions)
    starts = np.asarray(cuts, dtype=np.int64)[:-1]
    if not len(pos) or not np.isfinite(pos).all():
        return None
    axes = range(pos.shape[1])  # axis by axis: reduceat over a column is a fast loop, over rows is not
    f_lo = np.stack([np.minimum.reduceat(pos[:, a], starts) for a in axes], axis=1).astype(np.float64)
    f_hi = np.stack([np.maximum.reduceat(pos[:, a], starts) for a in axes], axis=1).astype(np.float64)
    lo, hi = f_lo.min(axis=0), f_hi.max(axis=0)
    scale = np.where(hi > lo, _STEPS / np.where(hi > lo, hi - lo, 1.0), 0.0)
    f_lo = np.floor((f_lo - lo) * scale)
    f_hi = np.ceil((f_hi - lo) * scale)
    f_hi[:, hi <= lo] = _STEPS  # a flat axis: every frame spans it
    q = np.concatenate([np.clip(f_lo, 0, _STEPS), np.clip(f_hi, 0, _STEPS)]).astype("<u2")
    m, d = len(starts), pos.shape[1]
    head = _BOUNDS_HEAD.pack(BOUNDS_MAGIC, frame_bounds_size(m, d) - 8, _BOUNDS_TAG, m, d, 0)
    return head + np.concatenate([lo, hi]).astype("<f8").tobytes() + q.tobytes()


def _parse_bounds(mv: memoryview, frames: int, *, key: str) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The (lo, hi) boxes, (frames, d) float64, of a bounds frame (``mv``: its bytes) listing ``frames``
    frames -- widened by one step each way, -inf / inf where unbounded -- else a :class:`FormatError`."""
    if mv.nbytes < _BOUNDS_HEAD.size:
        raise FormatError(f"{key}: bounds frame of {mv.nbytes} bytes is shorter than its header")
    magic, size, tag, m, d, _ = _BOUNDS_HEAD.unpack_from(mv, 0)
    if magic != BOUNDS_MAGIC or tag != _BOUNDS_TAG:
        raise FormatError(f"{key}: the seek table's last entry (0 bytes decoded) is not a zvf bounds frame")
    if m != frames or not 1 <= d <= MAX_BOUND_AXES or size + 8 != mv.nbytes or mv.nbytes != frame_bounds_size(m, d):
        raise FormatError(f"{key}: bounds frame of {mv.nbytes} bytes declares {m} frames of {d} axes; the seek "
                          f"table lists {frames} frames")
    box = np.frombuffer(mv, dtype="<f8", count=2 * d, offset=_BOUNDS_HEAD.size).astype(np.float64)
    if not np.isfinite(box).all() or (box[d:] < box[:d]).any():
        raise FormatError(f"{key}: bounds frame's cell box {box.tolist()} is not a box")
    q = np.frombuffer(mv, dtype="<u2", count=2 * m * d, offset=_BOUNDS_HEAD.size + 16 * d).astype(np.float64)
    q = q.reshape(2, m, d)
    step = (box[d:] - box[:d]) / _STEPS
    lo = np.where(q[0] <= 0, -np.inf, box[:d] + (q[0] - 1) * step)
    hi = np.where(q[1] >= _STEPS, np.inf, box[:d] + (q[1] + 1) * step)
    return lo, hi


def bin_pieces(positions: NDArray[np.floating] | NDArray[np.integer], counts: Sequence[int] | NDArray[np.int64],
               min_rows: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Each bin of a cell's rows (``positions``, sorted by bin, ``counts`` rows per bin) cut into compact
    pieces: a part of ``2 * min_rows`` rows or more is split in halves at the median of the longest side of
    its box, again and again (a k-d tree over the bin's rows' box: dense places get small pieces, sparse ones
    large).  Returns the order of the rows (bins kept, each bin's pieces one after the other) and where each
    piece ends (ascending rows; every bin's end among them): frames cut there hold rows of a small box each."""
    pos = np.asarray(positions)
    counts = np.asarray(counts, dtype=np.int64)
    order = np.arange(len(pos), dtype=np.int64)
    ends = np.cumsum(counts)
    floor = max(1, int(min_rows))
    pieces: list[int] = []
    for b in np.flatnonzero(counts >= 2 * floor).tolist():
        start, stop = int(ends[b] - counts[b]), int(ends[b])
        local, piece_ends = _kd_pieces(np.ascontiguousarray(pos[start:stop].T), floor)
        order[start:stop] = start + local
        pieces.extend(start + e for e in piece_ends)
    return order, np.union1d(ends[counts > 0], np.asarray(pieces, dtype=np.int64))


def _kd_pieces(columns: NDArray[np.floating] | NDArray[np.integer], floor: int) -> tuple[NDArray[np.int64], list[int]]:
    """One bin's rows (``columns``: axis by axis, so a split gathers one) in :func:`bin_pieces`' pieces: their
    order and where each piece ends."""
    local = np.arange(columns.shape[1], dtype=np.int64)
    ends: list[int] = []

    def split(first: int, end: int, lo: list[float], hi: list[float]) -> None:
        if end - first < 2 * floor:
            ends.append(end)
            return
        axis = max(range(len(lo)), key=lambda a: hi[a] - lo[a])
        rows = local[first:end]
        values = columns[axis][rows]
        half = (end - first) // 2
        part = np.argpartition(values, half)
        local[first:end] = rows[part]
        cut = float(values[part[half]])
        split(first, first + half, lo, [*hi[:axis], cut, *hi[axis + 1:]])
        split(first + half, end, [*lo[:axis], cut, *lo[axis + 1:]], hi)

    split(0, columns.shape[1], columns.min(axis=1).astype(float).tolist(), columns.max(axis=1).astype(float).tolist())
    return local, ends


def decode_frames(runs: Sequence[tuple[BytesLike, SeekTable, int, int, str]]
                  ) -> tuple[NDArray[np.uint8], NDArray[np.int64], NDArray[np.int64]]:
    """Runs of frames of seekable cells, each ``(bytes read, its cell's table, first frame, last frame, the
    cell's key)``, decoded together: every run checked to hold exactly the frames its table gives, each of
    them one zstd frame of the size the table gives (before anything is inflated) decoding to the size the
    table gives -- else a :class:`FormatError` naming the run's cell.  Returns the decoded bytes and where
    each frame's bytes begin and end in them, frames in order."""
    comps, decs, views = [], [], []
    for data, table, first, last, key in runs:
        view = byte_view(data)
        comp = table.compressed[first:last + 1]
        if view.nbytes != int(comp.sum()):
            raise FormatError(f"{key}: frames {first}..{last} are {view.nbytes} bytes, the seek table says "
                              f"{int(comp.sum())}")
        comps.append(comp)
        decs.append(table.decompressed[first:last + 1])
        views.append(view)
    comp_all = np.concatenate(comps) if comps else np.zeros(0, np.int64)
    dec_all = np.concatenate(decs) if decs else np.zeros(0, np.int64)
    if not len(comp_all):
        return np.zeros(0, np.uint8), np.zeros(0, np.int64), np.zeros(0, np.int64)
    ends = np.cumsum(comp_all)
    blob = views[0] if len(views) == 1 else b"".join(views)
    try:
        out, starts, stops = zstd_decompress_many(blob, ends - comp_all, ends, key=runs[0][4],
                                                  max_size=int(dec_all.max()))
        ok = np.array_equal(stops - starts, dec_all)
    except FormatError:
        if len(runs) == 1:
            raise
        ok = False
    if not ok:
        for run in runs:  # decode run by run: the error names the cell whose frames are wrong
            decode_frames([run])
        raise FormatError(f"{runs[0][4]}: frames do not decode to the sizes their seek tables give")
    return out, starts, stops


def frame_cuts(places: Sequence[int] | NDArray[np.int64], row_bytes: int, min_bytes: int) -> NDArray[np.int64]:
    """Row boundaries of the frames of a cell: frames of at least ``min_bytes`` raw bytes, each ending at one
    of ``places`` (ascending rows where a frame may end -- bins' ends, :func:`bin_pieces`' pieces' ends --
    the last the cell's rows); the last frame takes what is left.  Returns the ascending cut rows, first 0,
    last the cell's rows."""
    places = np.asarray(places, dtype=np.int64)
    total = int(places[-1]) if len(places) else 0
    step = max(1, -(-min_bytes // max(1, row_bytes)))  # rows a frame holds at least
    cuts = [0]
    while total - cuts[-1] >= 2 * step:  # a cut leaves at least one more full frame after it
        cut = int(places[np.searchsorted(places, cuts[-1] + step)])  # first place at or past the minimum
        if total - cut < step:
            break
        cuts.append(cut)
    cuts.append(total)
    return np.asarray(cuts, dtype=np.int64)


@dataclass(frozen=True)
class SeekTable:
    """A seekable cell's frames: compressed and decompressed sizes, and where each begins in both; with a
    bounds frame (the last entry), each data frame's box (``lo``, ``hi``: (frames, d), widened by a step)."""

    compressed: NDArray[np.int64]
    decompressed: NDArray[np.int64]
    lo: NDArray[np.float64] | None = None
    hi: NDArray[np.float64] | None = None

    def row_ends(self, n_rows: int, row_bytes: int, *, key: str) -> NDArray[np.int64]:
        """The row each entry's frame ends at, checked against a cell of ``n_rows`` rows of ``row_bytes`` (its
        fragment index): frames of whole rows adding up to the cell, the first holding the vlen header -- else
        a :class:`FormatError` naming ``key``."""
        out_ends = self.out_ends
        if int(out_ends[-1]) != VLEN_HEADER + n_rows * row_bytes or out_ends[0] < VLEN_HEADER or \
                ((out_ends - VLEN_HEADER) % row_bytes).any():
            raise FormatError(f"{key}: seek table frames decode to {self.decompressed.tolist()} bytes, not whole "
                              f"{row_bytes}-byte rows of the {n_rows} rows its fragment index lists")
        return (out_ends - VLEN_HEADER) // row_bytes

    def check_bounds(self, payload: BytesLike, dtype: np.dtype, *, key: str) -> None:
        """A :class:`FormatError` naming ``key`` unless every row of each frame of a cell's decoded ``payload``
        (its rows of ``dtype`` x the bounds' axes) lies inside that frame's bounds -- a bound that leaves a row
        out would make box queries skip it.  Nothing to check without bounds."""
        if self.lo is None or self.hi is None:
            return
        axes = self.lo.shape[1]
        row_bytes = np.dtype(dtype).itemsize * axes
        data = np.frombuffer(byte_view(payload), dtype=np.uint8)
        ends = self.row_ends(data.nbytes // row_bytes, row_bytes, key=key)[:len(self.lo)]
        rows = np.frombuffer(data[:int(ends[-1]) * row_bytes], dtype=np.dtype(dtype).newbyteorder("<"))
        rows = rows.reshape(-1, axes).astype(np.float64)
        frame = np.repeat(np.arange(len(ends)), np.diff(ends, prepend=0))
        outside = ~np.all((rows >= self.lo[frame]) & (rows <= self.hi[frame]), axis=1)
        if outside.any():
            at = int(np.flatnonzero(outside)[0])
            raise FormatError(f"{key}: row {at} ({rows[at].tolist()}) lies outside the bounds its frame "
                              f"{int(frame[at])} lists in the cell's bounds frame")

    def frames_meeting(self, lo: NDArray[np.float64], hi: NDArray[np.float64]) -> NDArray[np.bool_] | None:
        """Which entries may hold rows of the closed box ``lo``..``hi`` (the bounds frame's own entry: no),
        by the frames' bounds; None without bounds."""
        if self.lo is None or self.hi is None:
            return None
        meets = np.zeros(self.num_frames, dtype=bool)
        meets[:len(self.lo)] = np.all((self.lo <= hi) & (self.hi >= lo), axis=1)
        return meets

    @property
    def num_frames(self) -> int:
        return len(self.compressed)

    @property
    def nbytes(self) -> int:
        """Bytes the table's skippable frame takes at the cell's end."""
        return seek_table_size(self.num_frames)

    @property
    def memory_nbytes(self) -> int:
        """What the parsed table holds in memory (a cache's cost)."""
        bounds = 0 if self.lo is None or self.hi is None else self.lo.nbytes + self.hi.nbytes
        return 64 + 16 * self.num_frames + bounds

    @property
    def frames_nbytes(self) -> int:
        """Bytes of the zstd frames before the table."""
        return int(self.compressed.sum())

    @property
    def starts(self) -> NDArray[np.int64]:
        """Byte offset of each frame in the cell."""
        return np.cumsum(self.compressed) - self.compressed

    @property
    def out_ends(self) -> NDArray[np.int64]:
        """Offset in the decoded payload (vlen header included) where each frame's bytes end."""
        return np.cumsum(self.decompressed)

    @classmethod
    def parse(cls, tail: bytes | memoryview, *, key: str, max_frames: int) -> SeekTable | int | None:
        """The table ending ``tail`` (a cell's last bytes): None when the cell has no seek table (a plain
        zstd cell), the number of tail bytes needed when ``tail`` is too short to hold it all, else the
        table.  A footer that is there but wrong is a :class:`FormatError` naming ``key``."""
        mv = memoryview(tail).cast("B")
        if mv.nbytes < SEEK_FOOTER:
            return None
        n, descriptor, magic = _FOOTER.unpack_from(mv, mv.nbytes - SEEK_FOOTER)
        if magic != SEEKABLE_MAGIC:
            return None
        if descriptor != 0:
            raise FormatError(f"{key}: seek table descriptor {descriptor:#04x} is not supported "
                              "(zvf writes 0: no per-frame checksums)")
        if n < 1 or n > max_frames:
            raise FormatError(f"{key}: seek table lists {n} frames, expected 1 to {max_frames}")
        need = seek_table_size(n)
        if mv.nbytes < need:
            return need
        head, size = struct.unpack_from("<II", mv, mv.nbytes - need)
        if head != SEEK_TABLE_MAGIC or size != need - _HEAD:
            raise FormatError(f"{key}: seek table of {n} frames does not begin with its skippable frame header")
        entries = np.frombuffer(mv, dtype="<u4", count=2 * n, offset=mv.nbytes - need + _HEAD).reshape(n, 2)
        table = cls(entries[:, 0].astype(np.int64), entries[:, 1].astype(np.int64))
        if (table.compressed < 6).any():  # magic, header byte, one block header: no zstd frame is shorter
            raise FormatError(f"{key}: seek table lists a frame of fewer than 6 bytes")
        if n < 2 or table.decompressed[-1] != 0:
            return table
        size = int(table.compressed[-1])  # a frame of no rows ending the table: the bounds frame
        if size > frame_bounds_size(n - 1, MAX_BOUND_AXES):
            raise FormatError(f"{key}: seek table's last entry is a {size}-byte frame holding no rows; a bounds "
                              f"frame of {n - 1} frames is at most {frame_bounds_size(n - 1, MAX_BOUND_AXES)}")
        if mv.nbytes < need + size:
            return need + size
        lo, hi = _parse_bounds(mv[mv.nbytes - need - size:mv.nbytes - need], n - 1, key=key)
        return cls(table.compressed, table.decompressed, lo, hi)
