"""A cell's codec pipeline, read from and written to its array ``zarr.json``.

Supported pipelines (what 0.9.2 writes, plus what plain zarr may write for
the same arrays)::

    [vlen-bytes | bytes] [+ bytes-to-bytes codecs ...]
    sharding_indexed(inner chunk_shape all ones; codecs as above;
                     index_codecs [bytes little, crc32c?]; index at end or start)

0.9.2's exact codec JSON (``codecs_json`` reproduces it key for key):

* zstd:  ``{"name": "zstd", "configuration": {"level": 0, "checksum": false}}``
* blosc: ``{"name": "blosc", "configuration": {"typesize": 4, "cname": "zstd",
  "clevel": 5, "shuffle": "bitshuffle", "blocksize": 0}}`` -- what
  ``compressor="blosc"`` produces in 0.9.2; zarr-python 3.1.6 and 0.9.2
  both read it (numcodecs >= 0.16 honours ``typesize``, so the bytes match
  zarr's own encoder).
* sharded: ``[{"name": "sharding_indexed", "configuration": {"chunk_shape":
  [1, ...], "codecs": [...], "index_codecs": [{"name": "bytes",
  "configuration": {"endian": "little"}}, {"name": "crc32c"}],
  "index_location": "end"}}]``; the array's ``chunk_grid`` chunk_shape is then
  the number of cells per shard.

The bytes-to-bytes codecs read are every one zarr-python 3 and numcodecs
register that 0.9.2 can write into a ``compressor=[...]`` list: ``zstd``,
``blosc``, ``gzip``, ``crc32c`` and ``numcodecs.{zstd, blosc, gzip, zlib,
bz2, lzma, lz4, crc32, crc32c, adler32, fletcher32, jenkins_lookup3,
shuffle}``; every checksum is verified on read.

For sharded arrays :meth:`CellCodec.encode` / :meth:`CellCodec.decode`
work on one inner chunk (one cell); use :mod:`.shard` to assemble / split
shard objects.  Decompression is bounded (``max_size``) *before* anything
is allocated: zstd frame headers and block headers are walked to bound the
output (frames without a content size included), blosc and lz4 headers
are checked against the buffer, and the streaming decoders (gzip, zlib,
bz2, lzma) stop at ``max_size + 1`` bytes.  numcodecs is imported lazily.
"""

from __future__ import annotations

import json
import struct
import threading
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeGuard

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..config import tuning
from ..errors import FormatError, InvalidArgumentError, SizeLimitError
from .vlen import as_u8, byte_view, decode_vlen, decode_vlen_frames, encode_vlen

if TYPE_CHECKING:
    import zstandard
    from typing_extensions import Buffer

    from .types import BytesLike

__all__ = [
    "BLOSC_CONFIG",
    "ZSTD_CONFIG",
    "CellCodec",
    "blosc_decompress",
    "decoded_limit",
    "zstd_bound",
    "zstd_decompress",
    "zstd_decompress_many",
]


def decoded_limit(max_size: int | None) -> int:
    """The bound on one decoded chunk: ``max_size``, or the ``max_decoded_bytes`` setting in effect."""
    return tuning().max_decoded_bytes if max_size is None else max_size


ZSTD_CONFIG: dict[str, Any] = {"level": 0, "checksum": False}
BLOSC_CONFIG: dict[str, Any] = {"typesize": 4, "cname": "zstd", "clevel": 5, "shuffle": "bitshuffle", "blocksize": 0}
_INDEX_CODECS: list[dict[str, Any]] = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]
_BLOSC_SHUFFLE = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}
_BLOSC_CNAMES = {"blosclz", "lz4", "lz4hc", "snappy", "zlib", "zstd"}

_ZSTD_MAGIC = 0xFD2FB528
_BLOCK_MAX = 128 * 1024


def _skippable(magic: int) -> bool:
    """Whether a frame's first u32 is one of zstd's 16 skippable-frame magics (0x184D2A50..5F)."""
    return magic & 0xFFFFFFF0 == 0x184D2A50


# ---------------------------------------------------------------------------
# zstd


def zstd_bound(data: BytesLike, *, key: str = "?") -> list[tuple[int, int, int | None, int]]:
    """Walk zstd frames without decompressing.

    Returns per frame ``(start, end, content_size or None, output upper bound)``;
    skippable frames are omitted.  Raises :class:`FormatError` on anything
    that is not a well-formed frame sequence (dictionaries are unsupported).
    """
    mv = byte_view(data)
    size = mv.nbytes
    frames = []
    pos = 0
    if size == 0:
        raise FormatError(f"{key}: empty zstd stream")
    while pos < size:
        if pos + 4 > size:
            raise FormatError(f"{key}: truncated zstd frame magic at byte {pos}")
        (magic,) = struct.unpack_from("<I", mv, pos)
        if _skippable(magic):
            if pos + 8 > size:
                raise FormatError(f"{key}: truncated skippable zstd frame at byte {pos}")
            (ln,) = struct.unpack_from("<I", mv, pos + 4)
            pos += 8 + ln
            if pos > size:
                raise FormatError(f"{key}: skippable zstd frame overruns the data")
            continue
        if magic != _ZSTD_MAGIC:
            raise FormatError(f"{key}: not zstd data (magic 0x{magic:08X} at byte {pos})")
        start = pos
        pos += 4
        if pos >= size:
            raise FormatError(f"{key}: truncated zstd frame header")
        fhd = mv[pos]
        pos += 1
        fcs_flag = fhd >> 6
        single = (fhd >> 5) & 1
        if fhd & 0x08:
            raise FormatError(f"{key}: zstd frame header reserved bit set")
        checksum = (fhd >> 2) & 1
        did_size = (0, 1, 2, 4)[fhd & 3]
        fcs_size = (1 if single else 0, 2, 4, 8)[fcs_flag]
        window = None
        if not single:
            if pos >= size:
                raise FormatError(f"{key}: truncated zstd frame header")
            wd = mv[pos]
            pos += 1
            exp, mant = wd >> 3, wd & 7
            base = 1 << (10 + exp)
            window = base + (base >> 3) * mant
        if pos + did_size + fcs_size > size:
            raise FormatError(f"{key}: truncated zstd frame header")
        if did_size:
            did = int.from_bytes(mv[pos : pos + did_size], "little")
            if did:
                raise FormatError(f"{key}: zstd frame needs dictionary {did}, which zarr never uses")
        pos += did_size
        content = None
        if fcs_size:
            content = int.from_bytes(mv[pos : pos + fcs_size], "little")
            if fcs_size == 2:
                content += 256
        pos += fcs_size
        if single:
            window = content
        assert window is not None  # a single-segment frame always declares its content size
        block_max = min(window, _BLOCK_MAX)
        bound = 0
        while True:
            if pos + 3 > size:
                raise FormatError(f"{key}: truncated zstd block header at byte {pos}")
            bh = int.from_bytes(mv[pos : pos + 3], "little")
            pos += 3
            last = bh & 1
            btype = (bh >> 1) & 3
            bsize = bh >> 3
            if btype == 3:
                raise FormatError(f"{key}: reserved zstd block type at byte {pos - 3}")
            if btype == 1:  # RLE: one byte repeated bsize times
                if bsize > block_max:
                    raise FormatError(f"{key}: zstd RLE block of {bsize} bytes exceeds the block maximum")
                pos += 1
                bound += bsize
            else:
                if bsize > block_max:
                    raise FormatError(f"{key}: zstd block of {bsize} bytes exceeds the block maximum")
                pos += bsize
                bound += bsize if btype == 0 else block_max
            if pos > size:
                raise FormatError(f"{key}: zstd block overruns the data")
            if last:
                break
        if checksum:
            pos += 4
            if pos > size:
                raise FormatError(f"{key}: truncated zstd content checksum")
        if content is not None:
            if content > bound:
                raise FormatError(
                    f"{key}: zstd frame declares {content} bytes but its blocks can yield at most {bound}"
                )
            bound = content
        frames.append((start, pos, content, bound))
    return frames


def zstd_decompress(data: BytesLike, *, key: str = "?", max_size: int | None = None) -> bytes | memoryview:
    """Decompress zstd frame(s) with the output bounded by ``max_size`` before allocation.

    Frames that declare their content size are refused past ``max_size`` before any byte is inflated; a
    frame that does not (streaming writers) gets an output buffer of what is left of ``max_size`` at most
    (its blocks may bound it more tightly), and is refused if it needs more.  Several frames that all
    declare their sizes (seekable cells) are decoded in one pass, skippable frames between them skipped.
    """
    max_size = decoded_limit(max_size)
    framed = _seekable_run(data, key, max_size)
    if framed is not None:
        return framed
    frames = zstd_bound(data, key=key)
    declared = sum(f[2] or 0 for f in frames)
    if sum(f[3] for f in frames) > max_size and (declared > max_size or all(f[2] is not None for f in frames)):
        raise SizeLimitError(f"{key}: zstd data decompresses to {max(declared, max_size + 1)} bytes or more, "
                             f"above the {max_size}-byte limit")
    import zstandard

    dctx = _decompressor()
    mv = byte_view(data)
    if len(frames) > 1 and all(f[2] is not None for f in frames):
        run, _s, _e = _zstd_run(as_u8(mv[frames[0][0]:frames[-1][1]]),
                                np.asarray([f[2] for f in frames], dtype=np.int64), key)
        return memoryview(run)  # type: ignore[arg-type]  # numpy's stubs: ndarray.__buffer__ only on Python >= 3.12
    out = []
    left = max_size - declared  # for the frames of undeclared size
    for start, end, content, bound in frames:
        if content == 0:  # an empty frame; the block walk already validated it
            out.append(b"")
            continue
        cap = bound if content is not None else min(bound, left)
        try:
            piece = dctx.decompress(mv[start:end], max_output_size=max(cap, 1))
        except (zstandard.ZstdError, ValueError) as exc:
            if content is None and cap < bound:
                raise SizeLimitError(f"{key}: zstd data decompresses to more than the {max_size}-byte limit") from None
            raise FormatError(f"{key}: corrupt zstd data ({exc})") from exc
        if content is not None and len(piece) != content:
            raise FormatError(f"{key}: zstd frame yielded {len(piece)} bytes, header says {content}")
        if content is None:
            left -= len(piece)
        out.append(piece)
    if not out:
        raise FormatError(f"{key}: zstd data holds only skippable frames")
    return out[0] if len(out) == 1 else b"".join(out)


#: zstd's seekable format: the skippable frame holding a seek table, and the magic ending it.
SEEK_TABLE_MAGIC = 0x184D2A5E
SEEKABLE_MAGIC = 0x8F92EAB1
#: Frames a seekable cell holds at least for its table to stand in for the frame walk: checking frames all at
#: once costs a fixed ~0.2 ms of numpy calls, walking them ~5 us each.
SEEK_CHECK_FRAMES = 48


def _seekable_run(data: BytesLike, key: str, max_size: int) -> memoryview | None:
    """A seekable cell (:mod:`zvf.format.seekable`) decoded by its seek table: its frames' headers and blocks
    checked all at once, not walked one by one, then decoded in one pass.  None -- the frame walk decides,
    naming any defect -- for a table of fewer than :data:`SEEK_CHECK_FRAMES` entries, and unless the table
    accounts for every byte before it, each entry holding no rows is a skippable frame of exactly its size,
    and the others are back-to-back ordinary frames declaring the sizes the table lists."""
    mv = byte_view(data)
    size = mv.nbytes
    if size < 17 or struct.unpack_from("<IBI", mv, size - 9)[1:] != (0, SEEKABLE_MAGIC):
        return None
    n = struct.unpack_from("<I", mv, size - 9)[0]
    table = 8 * n + 17
    if n < SEEK_CHECK_FRAMES or table > size or \
            struct.unpack_from("<II", mv, size - table) != (SEEK_TABLE_MAGIC, table - 8):
        return None
    entries = np.frombuffer(mv, dtype="<u4", count=2 * n, offset=size - table + 8).reshape(n, 2).astype(np.int64)
    ends = np.cumsum(entries[:, 0])
    starts = ends - entries[:, 0]
    if int(ends[-1]) != size - table:
        return None
    u8 = as_u8(mv)
    rows = entries[:, 1] > 0
    for s, e in zip(starts[~rows].tolist(), ends[~rows].tolist()):
        if e - s < 8 or not _skippable(struct.unpack_from("<I", mv, s)[0]) or \
                struct.unpack_from("<I", mv, s + 4)[0] != e - s - 8:
            return None
    starts, ends = starts[rows], ends[rows]
    ok, content = _zstd_frames_checked(u8, starts, ends, max_size)
    if not len(starts) or not ok.all() or not np.array_equal(content, entries[rows, 1]) or \
            not np.array_equal(starts[1:], ends[:-1]):
        return None
    if int(content.sum()) > max_size:
        raise SizeLimitError(f"{key}: zstd data decompresses to {int(content.sum())} bytes, above the "
                             f"{max_size}-byte limit")
    run, _s, _e = _zstd_run(u8[int(starts[0]):int(ends[-1])], content, key)
    return memoryview(run)  # type: ignore[arg-type]  # numpy's stubs: ndarray.__buffer__ only on Python >= 3.12


_local = threading.local()


def _decompressor() -> zstandard.ZstdDecompressor:
    """This thread's reusable zstd decompression context (building one per frame dominated small reads).

    Reads use python-zstandard: importing numcodecs costs ~70 ms of a cold start, and the
    decompressed bytes do not depend on the library (writes still compress with numcodecs).
    """
    d: zstandard.ZstdDecompressor | None = getattr(_local, "zstd", None)
    if d is None:
        import zstandard

        d = _local.zstd = zstandard.ZstdDecompressor()
    return d


_BYTE_AT = np.arange(8)
_BYTE_SHIFT = 8 * np.arange(8, dtype=np.uint64)


def _le_at(u8: NDArray[np.uint8], pos: NDArray[np.int64], width: NDArray[np.int64]) -> NDArray[np.int64]:
    """Little-endian unsigned ints of ``width`` (0..8) bytes at ``pos`` (bytes past the buffer read as 0)."""
    idx = pos[:, None] + _BYTE_AT
    b = np.where((width[:, None] > _BYTE_AT) & (idx < u8.size), u8[np.minimum(idx, u8.size - 1)], 0)
    le: NDArray[np.int64] = (b.astype(np.uint64) << _BYTE_SHIFT).sum(axis=1, dtype=np.uint64).astype(np.int64)
    return le


def _zstd_frames_checked(
    u8: NDArray[np.uint8], starts: NDArray[np.int64], ends: NDArray[np.int64], max_size: int
) -> tuple[NDArray[np.bool_], NDArray[np.int64]]:
    """Vectorized :func:`zstd_bound` over many single-frame buffers.

    Returns ``(ok, content)``: ``ok`` marks buffers holding exactly one
    well-formed frame that declares a content size within its blocks' bound
    and ``max_size``; the rest (anything unusual or wrong) go through the
    scalar path, which decodes or names the defect.
    """
    n = starts.size
    size = ends - starts
    ok = size >= 6
    magic = _le_at(u8, starts, np.full(n, 4))
    ok &= magic == _ZSTD_MAGIC
    fhd = u8[np.minimum(starts + 4, u8.size - 1)].astype(np.int64)
    single = (fhd >> 5) & 1
    ok &= ((fhd & 0x08) == 0) & ((fhd & 3) == 0)  # no reserved bit, no dictionary id
    fcs_size = np.array([0, 2, 4, 8])[fhd >> 6]
    fcs_size = np.where((fhd >> 6 == 0) & (single == 1), 1, fcs_size)
    ok &= fcs_size > 0
    wd = u8[np.minimum(starts + 5, u8.size - 1)].astype(np.int64)
    base = np.left_shift(1, np.minimum(10 + (wd >> 3), 62))
    window = base + (base >> 3) * (wd & 7)
    hpos = starts + 5 + (1 - single)
    ok &= hpos + fcs_size <= ends
    content = _le_at(u8, hpos, np.where(ok, fcs_size, 0)) + np.where(fcs_size == 2, 256, 0)
    window = np.where(single == 1, content, window)
    block_max = np.minimum(window, _BLOCK_MAX)
    pos = hpos + fcs_size
    bound = np.zeros(n, dtype=np.int64)
    act = np.flatnonzero(ok)
    while act.size:  # one step per block position, all frames at once
        p = pos[act]
        good = p + 3 <= ends[act]
        bh = _le_at(u8, p, np.where(good, 3, 0))
        btype, bsize = (bh >> 1) & 3, bh >> 3
        good &= (btype != 3) & (bsize <= block_max[act])
        step = np.where(btype == 1, 4, 3 + bsize)
        bound[act] += np.where(btype == 0, bsize, np.where(btype == 1, bsize, block_max[act]))
        p = p + step
        good &= p <= ends[act]
        ok[act[~good]] = False
        pos[act] = p
        act = act[good & ((bh & 1) == 0)]
    pos += np.where((fhd >> 2) & 1 == 1, 4, 0)
    ok &= (pos == ends) & (content >= 0) & (content <= bound) & (content <= max_size)
    return ok, content


def zstd_decompress_many(
    data: BytesLike, starts: ArrayLike, ends: ArrayLike, *, key: str = "?", max_size: int | None = None
) -> tuple[NDArray[np.uint8], NDArray[np.int64], NDArray[np.int64]]:
    """Decompress many zstd buffers ``data[starts[i]:ends[i]]`` in one go.

    Returns ``(out, out_starts, out_ends)``: one uint8 buffer holding every
    output back to back.  Frame headers and block headers are checked for
    all buffers at once (no allocation beyond what the headers, bounded by
    the blocks, allow), then one C call decompresses them all; buffers with
    anything unusual take :func:`zstd_decompress`, which names the defect.
    """
    max_size = decoded_limit(max_size)
    import zstandard

    u8 = as_u8(data)
    starts = np.asarray(starts, dtype=np.int64).reshape(-1)
    ends = np.asarray(ends, dtype=np.int64).reshape(-1)
    ok, content = _zstd_frames_checked(u8, starts, ends, max_size)
    if starts.size > 1 and ok.all() and np.array_equal(starts[1:], ends[:-1]):
        return _zstd_run(u8[int(starts[0]):int(ends[-1])], content, key)
    ok_nonempty = np.flatnonzero(ok & (content > 0))
    pieces: list[Buffer] = [b""] * starts.size
    if ok_nonempty.size:
        mv = memoryview(u8)  # type: ignore[arg-type]  # numpy's stubs: ndarray.__buffer__ only on Python >= 3.12
        frames: list[bytes | bytearray | memoryview] = [
            mv[s:e] for s, e in zip(starts[ok_nonempty].tolist(), ends[ok_nonempty].tolist())
        ]
        try:
            got = _decompressor().multi_decompress_to_buffer(
                frames, decompressed_sizes=content[ok_nonempty].astype("<u8").tobytes())
        except (zstandard.ZstdError, ValueError) as exc:
            raise FormatError(f"{key}: corrupt zstd data ({exc})") from exc
        # zstandard's stub gives the collection __len__/__getitem__ but no __iter__; it iterates at run time
        for i, seg in zip(ok_nonempty.tolist(), got):  # type: ignore[call-overload]
            pieces[i] = seg
    for i in np.flatnonzero(~ok).tolist():
        pieces[i] = zstd_decompress(u8[starts[i]:ends[i]], key=f"{key}[{i}]", max_size=max_size)
    return _packed(pieces)


def _zstd_run(run: NDArray[np.uint8], content: NDArray[np.int64], key: str
              ) -> tuple[NDArray[np.uint8], NDArray[np.int64], NDArray[np.int64]]:
    """Frames lying back to back (the inner chunks of a shard, as writers lay them out), their declared
    ``content`` sizes checked: decompressed in one pass straight into one buffer, no piece per frame."""
    import zstandard

    total = int(content.sum())
    out = np.empty(total, dtype=np.uint8)
    view = memoryview(out)  # type: ignore[arg-type]  # numpy's stubs: ndarray.__buffer__ only on Python >= 3.12
    got = 0
    try:
        with _decompressor().stream_reader(memoryview(run), read_across_frames=True) as reader:  # type: ignore[arg-type]
            while got < total:
                n = reader.readinto(view[got:])
                if not n:
                    break
                got += n
            extra = reader.read(1)
    except zstandard.ZstdError as exc:
        raise FormatError(f"{key}: corrupt zstd data ({exc})") from exc
    if got != total or extra:
        raise FormatError(f"{key}: zstd frames decompress to {'more' if extra else got} bytes, "
                          f"their headers declare {total}")
    ends = np.cumsum(content)
    return out, ends - content, ends


def _packed(pieces: Sequence[Buffer]) -> tuple[NDArray[np.uint8], NDArray[np.int64], NDArray[np.int64]]:
    """Join bytes-like pieces into one uint8 buffer with their (starts, ends)."""
    lens = np.fromiter((memoryview(p).nbytes for p in pieces), dtype=np.int64, count=len(pieces))
    out_ends = np.cumsum(lens)
    return np.frombuffer(b"".join(pieces), dtype=np.uint8), out_ends - lens, out_ends


# ---------------------------------------------------------------------------
# blosc


def blosc_decompress(data: BytesLike, *, key: str = "?", max_size: int | None = None) -> bytes:
    """Decompress a blosc(1) buffer after checking its 16-byte header against the data."""
    max_size = decoded_limit(max_size)
    mv = byte_view(data)
    size = mv.nbytes
    if size < 16:
        raise FormatError(f"{key}: blosc buffer is {size} bytes, shorter than its 16-byte header")
    version, _vlz, flags, typesize, nbytes, blocksize, cbytes = struct.unpack_from("<BBBBIII", mv, 0)
    if version not in (1, 2):
        raise FormatError(f"{key}: blosc format version {version} is not supported")
    if cbytes != size:
        raise FormatError(f"{key}: blosc header says {cbytes} compressed bytes, buffer has {size}")
    if nbytes > max_size:
        raise SizeLimitError(f"{key}: blosc data decompresses to {nbytes} bytes, above the {max_size}-byte limit")
    if typesize == 0:
        raise FormatError(f"{key}: blosc typesize 0")
    if flags & 0x02:  # memcpyed: raw copy follows the header
        if size != 16 + nbytes:
            raise FormatError(f"{key}: blosc memcpy buffer of {size} bytes does not hold {nbytes} bytes")
        return bytes(mv[16:])
    if nbytes == 0:
        if size != 16:
            raise FormatError(f"{key}: empty blosc buffer has {size - 16} trailing bytes")
        return b""
    if blocksize == 0:
        raise FormatError(f"{key}: blosc blocksize 0 for {nbytes} bytes")
    nblocks = -(-nbytes // blocksize)
    if 16 + 4 * nblocks > size:
        raise FormatError(f"{key}: blosc buffer too short for its {nblocks} block offsets")
    bstarts = np.frombuffer(mv, dtype="<i4", count=nblocks, offset=16)
    if bstarts.size and (bstarts.min() < 16 + 4 * nblocks or bstarts.max() >= size):
        raise FormatError(f"{key}: blosc block offsets point outside the buffer")
    from numcodecs import blosc as _b

    try:
        out: bytes = _b.decompress(mv)
    except Exception as exc:
        raise FormatError(f"{key}: corrupt blosc data ({exc})") from exc
    if len(out) != nbytes:
        raise FormatError(f"{key}: blosc yielded {len(out)} bytes, header says {nbytes}")
    return out


# ---------------------------------------------------------------------------
# streaming decoders, checksums, lz4, shuffle


class _Decompressor(Protocol):
    """What zlib, bz2 and lzma decompression objects share (typing only)."""

    def decompress(self, data: bytes, max_length: int, /) -> bytes: ...

    @property
    def eof(self) -> bool: ...

    @property
    def unused_data(self) -> bytes: ...


def _stream_decompress(
    data: BytesLike, new: Callable[[], _Decompressor], *, key: str, what: str, max_size: int
) -> bytes:
    """Run ``new()`` decompressors over back-to-back streams, stopping past ``max_size``.

    The output never grows beyond ``max_size + 1`` bytes, so a bomb is
    refused without being inflated.
    """
    mv = byte_view(data)
    if mv.nbytes == 0:
        raise FormatError(f"{key}: empty {what} stream")
    out, total, rest = [], 0, bytes(mv)
    while rest:
        d = new()
        try:
            piece = d.decompress(rest, max_size - total + 1)
        except Exception as exc:  # each library has its own error types
            raise FormatError(f"{key}: corrupt {what} data ({exc})") from exc
        total += len(piece)
        if total > max_size:
            raise SizeLimitError(f"{key}: {what} data decompresses to more than the {max_size}-byte limit")
        out.append(piece)
        if not d.eof:
            raise FormatError(f"{key}: truncated {what} data")
        rest = d.unused_data
    return b"".join(out)


def _lzma_new(cfg: Mapping[str, Any], key: str) -> Callable[[], _Decompressor]:
    import lzma

    fmt = cfg.get("format", lzma.FORMAT_AUTO)
    if fmt == lzma.FORMAT_XZ or fmt == lzma.FORMAT_ALONE:
        fmt = lzma.FORMAT_AUTO  # the header names the container; AUTO reads both
    try:
        lzma.LZMADecompressor(format=fmt, filters=cfg.get("filters") if fmt == lzma.FORMAT_RAW else None)
    except (TypeError, ValueError, lzma.LZMAError) as exc:
        raise FormatError(f"{key}: lzma configuration {dict(cfg)!r} is not supported ({exc})") from exc
    return lambda: lzma.LZMADecompressor(format=fmt, filters=cfg.get("filters") if fmt == lzma.FORMAT_RAW else None)


def lz4_decompress(data: BytesLike, *, key: str = "?", max_size: int | None = None) -> bytes:
    """numcodecs' lz4 frame: i32 little-endian decoded size, then one lz4 block."""
    max_size = decoded_limit(max_size)
    mv = byte_view(data)
    if mv.nbytes < 4:
        raise FormatError(f"{key}: lz4 buffer of {mv.nbytes} bytes has no size header")
    (n,) = struct.unpack_from("<i", mv, 0)
    if n < 0 or n > max_size:
        raise (FormatError if n < 0 else SizeLimitError)(f"{key}: lz4 header says {n} bytes (limit {max_size})")
    # A block expands at most 255x; a header beyond that is a lie we need not allocate for.
    if n > 255 * (mv.nbytes - 4) + 16:
        raise FormatError(f"{key}: lz4 header says {n} bytes but {mv.nbytes - 4} compressed bytes cannot hold them")
    from numcodecs import lz4 as _lz4

    try:
        out = _lz4.decompress(mv)
    except Exception as exc:
        raise FormatError(f"{key}: corrupt lz4 data ({exc})") from exc
    if len(out) != n:
        raise FormatError(f"{key}: lz4 yielded {len(out)} bytes, header says {n}")
    return bytes(out)


def _checksum_fn(name: str) -> Callable[[bytes], int]:
    if name in ("crc32c", "numcodecs.crc32c"):
        from .shard import crc32c

        return crc32c
    return zlib.crc32 if name == "numcodecs.crc32" else zlib.adler32


# name -> where its 4-byte checksum sits by default (zarr's crc32c: end; numcodecs' crc32/adler32: start)
_CHECKSUMS = {"crc32c": "end", "numcodecs.crc32c": "end", "numcodecs.crc32": "start", "numcodecs.adler32": "start"}
# HDF5's checksums as numcodecs registers them: 4 bytes after the data (computed by numcodecs' compiled code)
_HDF5_CHECKSUMS = ("numcodecs.fletcher32", "numcodecs.jenkins_lookup3")


def _checksum_strip(data: BytesLike, name: str, cfg: Mapping[str, Any], key: str) -> memoryview:
    mv = byte_view(data)
    if mv.nbytes < 4:
        raise FormatError(f"{key}: {name} data of {mv.nbytes} bytes has no 4-byte checksum")
    at_end = cfg.get("location", _CHECKSUMS[name]) == "end"
    body, stored = (mv[:-4], mv[-4:]) if at_end else (mv[4:], mv[:4])
    want = int.from_bytes(stored, "little")
    got = _checksum_fn(name)(bytes(body)) & 0xFFFFFFFF
    if got != want:
        raise FormatError(f"{key}: {name} checksum mismatch (stored {want:#010x}, computed {got:#010x})")
    return body


def _checksum_add(raw: bytes, name: str, cfg: Mapping[str, Any]) -> bytes:
    if name in _HDF5_CHECKSUMS:
        return bytes(_hdf5_checksum(name, cfg).encode(np.frombuffer(raw, dtype=np.uint8)))
    c = (_checksum_fn(name)(raw) & 0xFFFFFFFF).to_bytes(4, "little")
    return raw + c if cfg.get("location", _CHECKSUMS[name]) == "end" else c + raw


def _hdf5_checksum(name: str, cfg: Mapping[str, Any]) -> Any:
    """numcodecs' codec for ``name`` (``jenkins_lookup3``: its ``initval``; zarr cannot store a ``prefix``)."""
    if name == "numcodecs.fletcher32":
        from numcodecs.fletcher32 import Fletcher32

        return Fletcher32()
    from numcodecs.checksum32 import JenkinsLookup3

    return JenkinsLookup3(initval=int(cfg.get("initval", 0)))


def _hdf5_checksum_strip(data: BytesLike, name: str, cfg: Mapping[str, Any], key: str) -> memoryview:
    """The data before a fletcher32 / jenkins_lookup3 checksum, verified (a mismatch names ``key``)."""
    mv = byte_view(data)
    if mv.nbytes < 4:
        raise FormatError(f"{key}: {name} data of {mv.nbytes} bytes has no 4-byte checksum")
    try:
        _hdf5_checksum(name, cfg).decode(np.frombuffer(mv, dtype=np.uint8))
    except RuntimeError as exc:  # numcodecs reports a mismatch so
        raise FormatError(f"{key}: {name} checksum mismatch ({str(exc).splitlines()[0]})") from None
    return mv[:-4]


def _unshuffle(data: BytesLike, elementsize: int) -> memoryview:
    """Invert numcodecs' byte shuffle: byte j of every element stored together, tail bytes as is."""
    a = np.frombuffer(byte_view(data), dtype=np.uint8)
    k = len(a) // elementsize
    out = a.copy()
    out[: k * elementsize] = a[: k * elementsize].reshape(elementsize, k).T.reshape(-1)
    return memoryview(out)  # type: ignore[arg-type]  # numpy's stubs: ndarray.__buffer__ only on Python >= 3.12


def _shuffle(raw: bytes, elementsize: int) -> bytes:
    a = np.frombuffer(raw, dtype=np.uint8)
    k = len(a) // elementsize
    out = a.copy()
    out[: k * elementsize] = a[: k * elementsize].reshape(k, elementsize).T.reshape(-1)
    return out.tobytes()


def _check_bytes_codec(name: str, cfg: dict[str, Any], key: str) -> tuple[str, dict[str, Any]]:
    """Validate one bytes-to-bytes codec of a ``codecs`` list; returns (name, configuration)."""
    def ints(*names: str) -> bool:
        return all(isinstance(cfg.get(k, 0), int) and not isinstance(cfg.get(k, 0), bool) for k in names)

    if name in ("zstd", "numcodecs.zstd"):
        if not ints("level") or not isinstance(cfg.get("checksum", False), bool):
            raise FormatError(f"{key}: zstd configuration {cfg!r} is not supported")
    elif name in ("blosc", "numcodecs.blosc"):
        shuffle = cfg.get("shuffle", "noshuffle")
        if not ((shuffle in _BLOSC_SHUFFLE or shuffle in (-1, 0, 1, 2)) and cfg.get("cname", "zstd") in _BLOSC_CNAMES
                and ints("clevel", "typesize", "blocksize")):
            raise FormatError(f"{key}: blosc configuration {cfg!r} is not supported")
    elif name in ("gzip", "numcodecs.gzip", "numcodecs.zlib", "numcodecs.bz2"):
        if not ints("level"):
            raise FormatError(f"{key}: {name} configuration {cfg!r} is not supported")
    elif name == "numcodecs.lzma":
        _lzma_new(cfg, key)
    elif name == "numcodecs.shuffle":
        if not ints("elementsize") or cfg.get("elementsize", 4) < 1:
            raise FormatError(f"{key}: shuffle configuration {cfg!r} is not supported")
    elif name in _CHECKSUMS:
        if cfg.get("location", _CHECKSUMS[name]) not in ("start", "end"):
            raise FormatError(f"{key}: {name} location {cfg.get('location')!r} is not supported")
    elif name == "numcodecs.fletcher32":
        if cfg:
            raise FormatError(f"{key}: fletcher32 takes no configuration, got {cfg!r}")
    elif name == "numcodecs.jenkins_lookup3":
        if not ints("initval") or not 0 <= cfg.get("initval", 0) <= 0xFFFFFFFF or cfg.get("prefix") is not None \
                or set(cfg) - {"initval", "prefix"}:
            raise FormatError(f"{key}: jenkins_lookup3 configuration {cfg!r} is not supported (an initval only)")
    elif name != "numcodecs.lz4":
        raise FormatError(f"{key}: unsupported codec {name!r}")
    return name, cfg


def _decode_one(name: str, cfg: Mapping[str, Any], data: BytesLike, key: str, max_size: int) -> bytes | memoryview:
    if name in ("zstd", "numcodecs.zstd"):
        return zstd_decompress(data, key=key, max_size=max_size)
    if name in ("blosc", "numcodecs.blosc"):
        return blosc_decompress(data, key=key, max_size=max_size)
    if name in ("gzip", "numcodecs.gzip"):
        return _stream_decompress(data, lambda: zlib.decompressobj(31), key=key, what="gzip", max_size=max_size)
    if name == "numcodecs.zlib":
        return _stream_decompress(data, zlib.decompressobj, key=key, what="zlib", max_size=max_size)
    if name == "numcodecs.bz2":
        import bz2

        return _stream_decompress(data, bz2.BZ2Decompressor, key=key, what="bz2", max_size=max_size)
    if name == "numcodecs.lzma":
        return _stream_decompress(data, _lzma_new(cfg, key), key=key, what="lzma", max_size=max_size)
    if name == "numcodecs.lz4":
        return lz4_decompress(data, key=key, max_size=max_size)
    if name == "numcodecs.shuffle":
        return _unshuffle(data, int(cfg.get("elementsize", 4)))
    if name in _HDF5_CHECKSUMS:
        return _hdf5_checksum_strip(data, name, cfg, key)
    return _checksum_strip(data, name, cfg, key)


def _encode_one(name: str, cfg: Mapping[str, Any], raw: bytes) -> bytes:
    if name in ("zstd", "numcodecs.zstd"):
        from numcodecs import zstd as _z

        packed: bytes = _z.compress(raw, int(cfg.get("level", 0)), bool(cfg.get("checksum", False)))
        return packed
    if name in ("blosc", "numcodecs.blosc"):
        from numcodecs import blosc as _b

        shuffle = cfg.get("shuffle", "noshuffle")
        codec = _b.Blosc(
            cname=str(cfg.get("cname", "zstd")),
            clevel=int(cfg.get("clevel", 5)),
            shuffle=_BLOSC_SHUFFLE.get(shuffle, shuffle),
            blocksize=int(cfg.get("blocksize", 0)),
            typesize=int(cfg.get("typesize", 1)),
        )
        return bytes(codec.encode(np.frombuffer(raw, dtype=np.uint8)))
    if name in ("gzip", "numcodecs.gzip"):
        import gzip

        return gzip.compress(raw, int(cfg.get("level", 1)), mtime=0)  # mtime 0: same input, same bytes
    if name == "numcodecs.zlib":
        return zlib.compress(raw, int(cfg.get("level", 1)))
    if name == "numcodecs.bz2":
        import bz2

        return bz2.compress(raw, int(cfg.get("level", 1)))
    if name == "numcodecs.lzma":
        import lzma

        return lzma.compress(raw, format=int(cfg.get("format", lzma.FORMAT_XZ)), check=int(cfg.get("check", -1)),
                             preset=cfg.get("preset"), filters=cfg.get("filters"))
    if name == "numcodecs.lz4":
        from numcodecs import lz4 as _lz4

        return bytes(_lz4.compress(raw, int(cfg.get("acceleration", 1))))
    if name == "numcodecs.shuffle":
        return _shuffle(raw, int(cfg.get("elementsize", 4)))
    return _checksum_add(raw, name, cfg)


# ---------------------------------------------------------------------------


def _int_list(v: object) -> TypeGuard[list[int]]:
    return isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)


def _codec_list(codecs: object, key: str, what: str) -> list[tuple[str, dict[str, Any]]]:
    """Normalize a zarr codecs list to ``(name, configuration)`` pairs."""
    if not isinstance(codecs, list):
        raise FormatError(f"{key}: {what} is not a list")
    out: list[tuple[str, dict[str, Any]]] = []
    for c in codecs:
        if isinstance(c, str):
            out.append((c, {}))
            continue
        if not isinstance(c, Mapping) or not isinstance(c.get("name"), str):
            raise FormatError(f"{key}: {what} entry {c!r} is not a codec object")
        cfg = c.get("configuration", {})
        if cfg is None:
            cfg = {}
        if not isinstance(cfg, Mapping):
            raise FormatError(f"{key}: codec {c['name']!r} configuration is not a JSON object")
        out.append((c["name"], dict(cfg)))
    return out


def _compressor_json(comp: Iterable[tuple[str, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """0.9.2 writes ``crc32c`` bare (no configuration), every other codec with one."""
    return [{"name": n} if n == "crc32c" and not c else {"name": n, "configuration": dict(c)} for n, c in comp]


#: ``compression=`` shorthands and the codec list each one writes (gzip: zarr-python's GzipCodec default).
_SHORTHANDS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "zstd": [("zstd", ZSTD_CONFIG)],
    "blosc": [("blosc", BLOSC_CONFIG)],
    "gzip": [("gzip", {"level": 5})],
}


@dataclass(frozen=True)
class CellCodec:
    """How a cell's stored bytes map to its payload.

    ``compressors``: the bytes-to-bytes codecs after the serializer, in encode
    order, as ``(name, configuration)`` pairs (empty: none).
    ``shard``: ``None`` or the number of cells per shard along each axis.
    ``serializer``: ``"vlen-bytes"`` (every spatial array) or ``"bytes"``
    (dense numeric arrays; then ``decode`` returns the raw chunk bytes).
    """

    compressors: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    shard: tuple[int, ...] | None = None
    serializer: str = "vlen-bytes"
    index_location: str = "end"
    index_crc: bool = True
    endian: str = "little"
    inner_rows: int | None = None  # rows per inner chunk of a sharded 1-D array (None: one cell each)

    def __hash__(self) -> int:
        return hash((json.dumps(self.codecs_json(), sort_keys=True), self.serializer))

    # -- construction -------------------------------------------------------

    @classmethod
    def for_writing(
        cls, compression: str | list[Any] | Literal[False] | None = None, shard_shape: Sequence[int] | None = None
    ) -> CellCodec:
        """The codec 0.9.2 writes for ``compressor=compression, shard_shape=shard_shape``.

        ``compression``: None, ``"zstd"``, ``"blosc"``, ``"gzip"``, or a codec list
        as 0.9.2 takes it (``[{"name": "gzip", "configuration": {"level": 5}}]``),
        written verbatim.
        """
        comp: tuple[tuple[str, Mapping[str, Any]], ...]
        if compression is None or compression is False or compression == "none":
            comp = ()
        elif isinstance(compression, str) and compression in _SHORTHANDS:
            comp = tuple((n, dict(c)) for n, c in _SHORTHANDS[compression])
        elif isinstance(compression, list):
            try:
                comp = tuple(
                    _check_bytes_codec(n, c, "compression") for n, c in _codec_list(compression, "compression", "list")
                )
            except FormatError as exc:
                raise InvalidArgumentError(str(exc)) from None
        else:
            raise InvalidArgumentError(
                f"compression: expected None, 'zstd', 'blosc', 'gzip' or a list of codecs, got {compression!r}")
        shard = None
        if shard_shape is not None:
            if isinstance(shard_shape, (int, np.integer)) or not all(
                isinstance(s, (int, np.integer)) and s >= 1 for s in shard_shape
            ):
                raise InvalidArgumentError(
                    f"shard_shape: expected a tuple of cells per shard (>= 1) per axis, got {shard_shape!r}"
                )
            shard = tuple(int(s) for s in shard_shape)
        return cls(comp, shard)

    @classmethod
    def from_array_metadata(cls, meta: Mapping[str, Any], *, key: str = "?") -> CellCodec:
        """Parse an array ``zarr.json`` dict; :class:`FormatError` names unsupported codecs."""
        if not isinstance(meta, Mapping):
            raise FormatError(f"{key}: array metadata is not a JSON object")
        codecs = _codec_list(meta.get("codecs"), key, "codecs")
        if not codecs:
            raise FormatError(f"{key}: array metadata has no codecs list")
        shard = None
        inner_rows = None
        loc = "end"
        crc = True
        if codecs[0][0] == "sharding_indexed":
            if len(codecs) != 1:
                raise FormatError(f"{key}: codecs after sharding_indexed are not supported")
            cfg = codecs[0][1]
            inner = cfg.get("chunk_shape")
            # Spatial arrays shard one cell per inner chunk; 1-D arrays (manifests) may pack several rows.
            if not _int_list(inner) or not all(x >= 1 for x in inner) or (
                len(inner) != 1 and any(x != 1 for x in inner)
            ):
                raise FormatError(f"{key}: sharding_indexed inner chunk_shape {inner!r} is not supported")
            grid = meta.get("chunk_grid")
            gcfg = grid.get("configuration") if isinstance(grid, Mapping) else None
            outer = gcfg.get("chunk_shape") if isinstance(gcfg, Mapping) else None
            if not _int_list(outer) or len(outer) != len(inner) or not all(
                x >= 1 and x % i == 0 for x, i in zip(outer, inner)
            ):
                raise FormatError(f"{key}: shard shape {outer!r} does not match inner chunk_shape {inner!r}")
            shard = tuple(outer)
            inner_rows = inner[0] if len(inner) == 1 and inner[0] != 1 else None
            loc = cfg.get("index_location", "end")
            if loc not in ("end", "start"):
                raise FormatError(f"{key}: sharding index_location {loc!r} is not supported")
            icodecs = _codec_list(cfg.get("index_codecs", _INDEX_CODECS), key, "index_codecs")
            names = [n for n, _c in icodecs]
            if names == ["bytes", "crc32c"]:
                crc = True
            elif names == ["bytes"]:
                crc = False
            else:
                raise FormatError(f"{key}: sharding index_codecs {names!r} are not supported")
            if icodecs[0][1].get("endian", "little") != "little":
                raise FormatError(f"{key}: big-endian shard index is not supported")
            codecs = _codec_list(cfg.get("codecs"), key, "sharding_indexed codecs")
            if not codecs:
                raise FormatError(f"{key}: sharding_indexed has no inner codecs")
        sname, scfg = codecs[0]
        endian = "little"
        if sname == "bytes":
            endian = scfg.get("endian", "little")
            if endian not in ("little", "big"):
                raise FormatError(f"{key}: bytes codec endian {endian!r} is not supported")
        elif sname != "vlen-bytes":
            raise FormatError(f"{key}: unsupported serializer codec {sname!r} (expected vlen-bytes or bytes)")
        comp = tuple(_check_bytes_codec(n, dict(c), key) for n, c in codecs[1:])
        return cls(comp, shard, sname, loc, crc, endian, inner_rows)

    # -- JSON -----------------------------------------------------------------

    def codecs_json(self) -> list[dict[str, Any]]:
        """The ``codecs`` list for zarr.json, exactly as 0.9.2 writes it."""
        ser = (
            {"name": "vlen-bytes", "configuration": {}}
            if self.serializer == "vlen-bytes"
            else {"name": "bytes", "configuration": {"endian": self.endian}}
        )
        inner = [ser, *_compressor_json(self.compressors)]
        if self.shard is None:
            return inner
        return [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": [self.inner_rows] if self.inner_rows else [1] * len(self.shard),
                    "codecs": inner,
                    "index_codecs": [dict(c) for c in (_INDEX_CODECS if self.index_crc else _INDEX_CODECS[:1])],
                    "index_location": self.index_location,
                },
            }
        ]

    @property
    def cells_per_shard(self) -> int:
        """Inner chunks in one shard."""
        if self.shard is None:
            return 1
        return int(np.prod(self.shard)) // (self.inner_rows or 1)

    # -- bytes ----------------------------------------------------------------

    def compress(self, raw: BytesLike) -> bytes:
        """Raw bytes through the bytes-to-bytes codecs (what every encode ends with)."""
        out = bytes(byte_view(raw)) if not isinstance(raw, bytes) else raw
        for name, cfg in self.compressors:
            out = _encode_one(name, cfg, out)
        return out

    def _decompress(self, raw: BytesLike, key: str, max_size: int | None) -> memoryview:
        """Undo the codecs in reverse order; each stage's output is bounded by ``max_size``."""
        max_size = decoded_limit(max_size)
        data = raw
        for name, cfg in reversed(self.compressors):
            data = _decode_one(name, cfg, data, key, max_size)
        mv = byte_view(data)
        if mv.nbytes > max_size:
            raise SizeLimitError(f"{key}: cell of {mv.nbytes} bytes is above the {max_size}-byte limit")
        return mv

    def encode_items(self, items: Sequence[BytesLike]) -> bytes:
        """Items -> stored bytes of one chunk (one inner chunk when sharded)."""
        if self.serializer != "vlen-bytes":
            raise InvalidArgumentError("encode_items: this array uses the bytes serializer; use encode()")
        return self.compress(encode_vlen(items))

    def decode_items(
        self, raw: BytesLike, *, key: str = "?", expected: int | None = None, max_size: int | None = None
    ) -> list[memoryview]:
        """Stored bytes of one chunk -> item views."""
        if self.serializer != "vlen-bytes":
            raise InvalidArgumentError(f"{key}: decode_items on a bytes-serialized array; use decode()")
        return decode_vlen(self._decompress(raw, key, max_size), key=key, expected=expected)

    def decode_many(
        self, data: BytesLike, starts: ArrayLike, ends: ArrayLike, *, key: str = "?", max_size: int | None = None
    ) -> tuple[NDArray[np.uint8], NDArray[np.int64], NDArray[np.int64]]:
        """Stored chunks lying at ``data[starts[i]:ends[i]]`` -> ``(buffer, starts, ends)`` of their decoded bytes.

        Uncompressed chunks stay where they are (no copy); a zstd pipeline is
        decompressed in one batch; other pipelines chunk by chunk.
        """
        starts = np.asarray(starts, dtype=np.int64).reshape(-1)
        ends = np.asarray(ends, dtype=np.int64).reshape(-1)
        if not self.compressors:
            return as_u8(data), starts, ends
        if len(self.compressors) == 1 and self.compressors[0][0] in ("zstd", "numcodecs.zstd"):
            return zstd_decompress_many(data, starts, ends, key=key, max_size=max_size)
        mv = byte_view(data)
        return _packed([self._decompress(mv[s:e], f"{key}[{i}]", max_size)
                        for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist()))])

    def decode_items_many(
        self, data: BytesLike, starts: ArrayLike, ends: ArrayLike, *, key: str = "?", expected: ArrayLike | None = None,
        max_size: int | None = None,
    ) -> tuple[NDArray[np.uint8], NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
        """Many stored multi-item chunks -> ``(buffer, counts, item_starts, item_lengths)`` with no per-item objects.

        ``counts[i]`` items come from chunk ``i``; see
        :func:`zvf.format.vlen.decode_vlen_frames`.
        """
        if self.serializer != "vlen-bytes":
            raise InvalidArgumentError(f"{key}: decode_items_many on a bytes-serialized array; use decode()")
        buf, s, e = self.decode_many(data, starts, ends, key=key, max_size=max_size)
        counts, item_starts, item_lengths = decode_vlen_frames(buf, s, e, key=key, expected=expected)
        return buf, counts, item_starts, item_lengths

    def encode(self, payload: BytesLike) -> bytes:
        """One payload -> stored bytes (vlen frame of one item, or raw bytes for ``bytes``)."""
        if self.serializer == "vlen-bytes":
            return self.compress(encode_vlen([payload]))
        return self.compress(bytes(byte_view(payload)))

    def decode(self, raw: BytesLike, *, key: str = "?", max_size: int | None = None) -> bytes:
        """Stored bytes -> the single payload as ``bytes`` (see :meth:`decode_view` to avoid the copy)."""
        return bytes(self.decode_view(raw, key=key, max_size=max_size))

    def decode_view(self, raw: BytesLike, *, key: str = "?", max_size: int | None = None) -> memoryview:
        """Like :meth:`decode` but a zero-copy view into ``raw`` or the decompressed buffer (bulk reads)."""
        data = self._decompress(raw, key, max_size)
        if self.serializer != "vlen-bytes":
            return byte_view(data)
        return decode_vlen(data, key=key, expected=1)[0]
