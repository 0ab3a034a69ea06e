"""Compressed cells readable in parts: zstd frames per run of bins, then a seek table (zstd's "seekable format").

A point-cloud cell without object ids holds its rows sorted by bin (one range fragment per bin,
``fragments_tile``).  zvf writes such a zstd cell as a sequence of ordinary zstd frames, each holding
the rows of consecutive bins (the first frame also the 8-byte vlen header), followed by a skippable
frame holding the seek table, in the layout of zstd's seekable format (little endian)::

    u32 0x184D2A5E                skippable frame magic
    u32 8 * n + 9                 bytes of the rest of this frame
    n x (u32 compressed size, u32 decompressed size)
    u32 n                         number of frames
    u8  descriptor                0 (no per-frame checksums; zvf reads only that form)
    u32 0x8F92EAB1                seekable magic

Every zstd decoder (numcodecs, zarr-python, 0.9.2) decodes a frame sequence to the concatenation of
its frames and skips skippable frames, so the cell means what a one-frame cell means.  A reader that
knows the cell's end reads the table from there, then range-reads only the frames holding the rows
it wants.  This module is the byte layout only (no I/O).
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
from .codecs import CellCodec, zstd_decompress_many
from .vlen import VLEN_HEADER, byte_view, encode_vlen

if TYPE_CHECKING:
    from .types import BytesLike

__all__ = ["SEEK_FOOTER", "SeekTable", "decode_frames", "encode_seekable", "frame_cuts", "seek_table_bytes",
           "seek_table_size", "seekable_codec"]

SKIPPABLE_MAGIC = 0x184D2A5E
SEEKABLE_MAGIC = 0x8F92EAB1
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
    return struct.pack("<II", SKIPPABLE_MAGIC, _ENTRY * n + SEEK_FOOTER) + entries.tobytes() + _FOOTER.pack(
        n, 0, SEEKABLE_MAGIC)


def seekable_codec(codec: CellCodec) -> bool:
    """Whether cells of ``codec`` can be written seekable: vlen-bytes, then zstd alone."""
    return codec.serializer == "vlen-bytes" and len(codec.compressors) == 1 and \
        codec.compressors[0][0] in ("zstd", "numcodecs.zstd")


def encode_seekable(codec: CellCodec, payload: BytesLike, cuts: Sequence[int] | NDArray[np.int64],
                    row_bytes: int) -> bytes:
    """One cell payload as zstd frames of rows ``cuts[i]:cuts[i + 1]`` (the first with the vlen header),
    then the seek table (see the module docstring)."""
    if not seekable_codec(codec):
        raise InvalidArgumentError("encode_seekable: the cell's codecs are not vlen-bytes + zstd")
    framed = memoryview(encode_vlen([payload]))
    bounds = [0, *(VLEN_HEADER + int(c) * row_bytes for c in cuts[1:-1]), framed.nbytes]
    frames = [codec.compress(framed[a:b]) for a, b in pairwise(bounds)]
    return b"".join([*frames, seek_table_bytes([len(f) for f in frames], np.diff(bounds).tolist())])


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


def frame_cuts(counts: Sequence[int] | NDArray[np.int64], row_bytes: int, min_bytes: int) -> NDArray[np.int64]:
    """Row boundaries of the frames of a cell whose bins hold ``counts`` rows each, in bin order: runs of
    whole bins of at least ``min_bytes`` raw bytes (the last run takes what is left).  Returns the
    ascending cut rows, first 0, last the cell's rows."""
    ends = np.cumsum(np.asarray(counts, dtype=np.int64))
    total = int(ends[-1]) if len(ends) else 0
    cuts = [0]
    step = max(1, -(-min_bytes // max(1, row_bytes)))  # rows a frame holds at least
    while total - cuts[-1] >= 2 * step:  # a cut leaves at least one more full frame after it
        at = int(np.searchsorted(ends, cuts[-1] + step))  # first bin boundary at or past the minimum
        cut = int(ends[at])
        if total - cut < step:
            break
        cuts.append(cut)
    cuts.append(total)
    return np.asarray(cuts, dtype=np.int64)


@dataclass(frozen=True)
class SeekTable:
    """A seekable cell's frames: compressed and decompressed sizes, and where each begins in both."""

    compressed: NDArray[np.int64]
    decompressed: NDArray[np.int64]

    @property
    def num_frames(self) -> int:
        return len(self.compressed)

    @property
    def nbytes(self) -> int:
        """Bytes the table's skippable frame takes at the cell's end."""
        return seek_table_size(self.num_frames)

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
        if head != SKIPPABLE_MAGIC or size != need - _HEAD:
            raise FormatError(f"{key}: seek table of {n} frames does not begin with its skippable frame header")
        entries = np.frombuffer(mv, dtype="<u4", count=2 * n, offset=mv.nbytes - need + _HEAD).reshape(n, 2)
        table = cls(entries[:, 0].astype(np.int64), entries[:, 1].astype(np.int64))
        if (table.compressed < 6).any():  # magic, header byte, one block header: no zstd frame is shorter
            raise FormatError(f"{key}: seek table lists a frame of fewer than 6 bytes")
        return table
