"""Zarr ``vlen-bytes`` frames: ``u32 n``, then ``n`` x (``u32 len``, ``len`` bytes), little endian.

Every spatial cell of a ZVF store is such a frame holding one item; the
``object_index/manifests`` and ``groups`` chunks hold one item per row.
Item boundaries depend on every earlier length prefix, so decoding is a
scalar walk over the *items* (never over their bytes); all counts read
from the blob are checked against its length before anything is
allocated.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, DTypeLike, NDArray

from ..errors import FormatError, InvalidArgumentError

if TYPE_CHECKING:
    from typing_extensions import Buffer

    from .types import BytesLike

__all__ = [
    "VLEN_HEADER",
    "as_u8",
    "byte_view",
    "decode_vlen",
    "decode_vlen_frames",
    "decode_vlen_spans",
    "encode_vlen",
    "encode_vlen_packed",
    "encode_vlen_rows",
]

_U32 = struct.Struct("<I")
_ONE_ITEM = struct.Struct("<II")  # count, then the length of item 0
#: Bytes of a one-item frame before its item (u32 count, u32 length): where a cell's rows begin.
VLEN_HEADER = _ONE_ITEM.size
_MAX_ITEM = 0xFFFFFFFF


def as_u8(buf: BytesLike) -> NDArray[np.uint8]:
    """A read-only ``uint8`` view of any contiguous bytes-like object (no copy)."""
    if isinstance(buf, np.ndarray):
        if buf.dtype == np.uint8 and buf.ndim == 1:
            return buf
        if not buf.flags.c_contiguous:
            buf = np.ascontiguousarray(buf)
        return buf.reshape(-1).view(np.uint8)
    # numpy's stubs accept only a few named buffer types; frombuffer takes any buffer (obstore Bytes) at run time
    u8: NDArray[np.uint8] = np.frombuffer(buf, dtype=np.uint8)  # type: ignore[call-overload]
    return u8


def byte_view(buf: BytesLike) -> memoryview:
    """A flat ``'B'`` memoryview of any bytes-like object (copies only if non-contiguous)."""
    # numpy's stubs give ndarray a __buffer__ only for Python >= 3.12; it exports its buffer on 3.11 too
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)  # type: ignore[arg-type]
    if mv.format == "B" and mv.ndim == 1 and mv.c_contiguous:
        return mv
    if not mv.c_contiguous:
        mv = memoryview(mv.tobytes())
    return mv.cast("B")


def _nbytes(item: BytesLike) -> int:
    if isinstance(item, (bytes, bytearray)):
        return len(item)
    return memoryview(item).nbytes  # type: ignore[arg-type]  # ndarray: see byte_view


def encode_vlen(items: Sequence[BytesLike]) -> bytes:
    """Frame ``items`` (bytes-like) as one vlen-bytes chunk."""
    parts: list[Buffer] = [_U32.pack(len(items))]
    for i, item in enumerate(items):
        n = _nbytes(item)
        if n > _MAX_ITEM:
            raise InvalidArgumentError(f"items[{i}]: {n} bytes exceed the u32 length prefix")
        parts.append(_U32.pack(n))
        parts.append(item if isinstance(item, (bytes, bytearray, memoryview)) else memoryview(item))  # type: ignore[arg-type]  # ndarray: see byte_view
    return b"".join(parts)


def encode_vlen_rows(rows: NDArray[np.void], take: NDArray[np.integer]) -> NDArray[np.uint8] | None:
    """``encode_vlen([rows[take]])`` with the rows gathered straight into the frame (a cell's vertices:
    one copy of the payload instead of a gathered copy and a joined one), as a uint8 array.

    ``rows``: a 1-D array of whole rows (e.g. ``np.void`` row views); None when the item would exceed
    the u32 length prefix (:func:`encode_vlen` says so).
    """
    nbytes = len(take) * rows.itemsize
    if nbytes > _MAX_ITEM:
        return None
    frame = np.empty(8 + nbytes, dtype=np.uint8)
    frame[:8] = np.array([1, nbytes], dtype="<u4").view(np.uint8)
    # mode="clip": a direct gather into ``out`` (the default buffers it); the caller's indices are valid
    np.take(rows, take, axis=0, out=frame[8:].view(rows.dtype), mode="clip")
    return frame


def encode_vlen_packed(data: BytesLike, offsets: ArrayLike) -> bytes:
    """Frame items given as one buffer plus ``offsets`` (``n+1`` byte offsets).

    Vectorized twin of :func:`encode_vlen` for many small items (e.g. one
    manifest per object): no per-item Python work.
    """
    src = as_u8(data)
    off = np.asarray(offsets, dtype=np.int64)
    if off.ndim != 1 or off.size < 1:
        raise InvalidArgumentError("offsets: need a 1-D array of n+1 byte offsets")
    n = off.size - 1
    lens = np.diff(off)
    if n and (off[0] < 0 or np.any(lens < 0) or off[-1] > src.size):
        raise InvalidArgumentError("offsets: must be non-decreasing and inside data")
    if n and int(lens.max()) > _MAX_ITEM:
        raise InvalidArgumentError("offsets: an item exceeds the u32 length prefix")
    total = 4 + 4 * n + int(off[-1] - off[0])
    out = np.empty(total, dtype=np.uint8)
    out[:4] = np.frombuffer(_U32.pack(n), dtype=np.uint8)
    if n == 0:
        return out.tobytes()
    # item i's prefix sits at 4 + 4*i + (off[i] - off[0])
    pre = 4 + 4 * np.arange(n, dtype=np.int64) + (off[:-1] - off[0])
    out[pre[:, None] + np.arange(4)] = lens.astype("<u4").view(np.uint8).reshape(n, 4)
    body_mask = np.ones(total, dtype=bool)
    body_mask[:4] = False
    body_mask[(pre[:, None] + np.arange(4)).ravel()] = False
    out[body_mask] = src[int(off[0]) : int(off[-1])]
    return out.tobytes()


def decode_vlen_spans(
    buf: BytesLike, *, key: str = "?", expected: int | None = None
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Item ``(starts, lengths)`` (int64 byte offsets into ``buf``) of a vlen frame.

    Lets hot paths (manifests) keep one buffer instead of many slices.
    """
    mv = byte_view(buf)
    size = mv.nbytes
    if size < 4:
        raise FormatError(f"{key}: vlen-bytes frame is {size} bytes, shorter than its 4-byte count")
    (n,) = _U32.unpack_from(mv, 0)
    if expected is not None and n != expected:
        raise FormatError(f"{key}: vlen-bytes frame holds {n} items, expected {expected}")
    if 4 + 4 * n > size:
        raise FormatError(f"{key}: vlen-bytes frame declares {n} items but is only {size} bytes")
    starts = np.empty(n, dtype=np.int64)
    lengths = np.empty(n, dtype=np.int64)
    pos = 4
    unpack = _U32.unpack_from
    for i in range(n):
        if pos + 4 > size:
            raise FormatError(f"{key}: vlen-bytes frame truncated at the length of item {i} of {n}")
        (ln,) = unpack(mv, pos)
        pos += 4
        end = pos + ln
        if end > size:
            raise FormatError(
                f"{key}: vlen-bytes item {i} of {n} declares {ln} bytes, only {size - pos} remain"
            )
        starts[i] = pos
        lengths[i] = ln
        pos = end
    if pos != size:
        raise FormatError(f"{key}: vlen-bytes frame has {size - pos} trailing bytes after {n} items")
    return starts, lengths


def decode_vlen(buf: BytesLike, *, key: str = "?", expected: int | None = None) -> list[memoryview]:
    """Split a vlen-bytes frame into zero-copy item views."""
    mv = byte_view(buf)
    if expected == 1 and mv.nbytes >= 8 and _ONE_ITEM.unpack_from(mv, 0) == (1, mv.nbytes - 8):
        return [mv[8:]]  # a cell's single item (every spatial cell): no walk
    starts, lengths = decode_vlen_spans(mv, key=key, expected=expected)
    return [mv[s : s + n] for s, n in zip(starts.tolist(), lengths.tolist())]


def decode_vlen_frames(
    buf: BytesLike, starts: ArrayLike, ends: ArrayLike, *, key: str = "?", expected: ArrayLike | None = None
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """Item spans of many vlen frames lying at ``buf[starts[f]:ends[f]]``, all at once.

    Returns ``(counts, item_starts, item_lengths)``: items in frame order,
    ``counts[f]`` of them from frame ``f``.  The walk steps over item
    *positions* across every frame together (one numpy step per position,
    not per item), so thousands of small frames (the inner chunks of a
    manifest shard) cost a handful of numpy calls; a few big frames take
    the scalar walk, which is cheaper per item.  ``expected``: items per
    frame (int or array), checked.
    """
    u8 = as_u8(buf)
    starts = np.asarray(starts, dtype=np.int64).reshape(-1)
    ends = np.asarray(ends, dtype=np.int64).reshape(-1)
    nf = starts.size
    if ends.size != nf or (nf and (starts.min() < 0 or int(ends.max()) > u8.size or np.any(ends < starts))):
        raise InvalidArgumentError("starts/ends: frames must lie inside buf")
    want = None if expected is None else np.broadcast_to(np.asarray(expected, dtype=np.int64), (nf,))
    short = ends - starts < 4
    if short.any():
        f = int(np.flatnonzero(short)[0])
        raise FormatError(
            f"{key}[{f}]: vlen-bytes frame is {int(ends[f] - starts[f])} bytes, shorter than its 4-byte count"
        )
    counts = u32_at(u8, starts)
    if want is not None and np.any(counts != want):
        f = int(np.flatnonzero(counts != want)[0])
        raise FormatError(f"{key}[{f}]: vlen-bytes frame holds {int(counts[f])} items, expected {int(want[f])}")
    over = starts + 4 + 4 * counts > ends
    if over.any():
        f = int(np.flatnonzero(over)[0])
        raise FormatError(f"{key}[{f}]: vlen-bytes frame declares {int(counts[f])} items but is only "
                          f"{int(ends[f] - starts[f])} bytes")
    total = int(counts.sum())
    if nf <= 8 or total <= 2 * nf:  # few frames: the scalar walk is cheaper than many tiny numpy steps
        parts = [
            decode_vlen_spans(u8[s:e], key=f"{key}[{f}]")
            for f, (s, e) in enumerate(zip(starts.tolist(), ends.tolist()))
        ]
        item_starts = np.concatenate([p[0] + s for p, s in zip(parts, starts.tolist())] or [np.zeros(0, np.int64)])
        item_lengths = np.concatenate([p[1] for p in parts] or [np.zeros(0, np.int64)])
        return counts, item_starts, item_lengths
    first = np.cumsum(counts) - counts  # output slot of each frame's first item
    item_starts = np.empty(total, dtype=np.int64)
    item_lengths = np.empty(total, dtype=np.int64)
    pos = starts + 4
    u32 = byte_records(u8, "<u4")
    same = int(counts.min()) == int(counts.max())  # the usual case: every frame holds as many items
    act = np.arange(nf) if same else np.flatnonzero(counts > 0)
    j = 0
    while act.size and (not same or j < int(counts[0])):
        p, e = (pos, ends) if same else (pos[act], ends[act])
        trunc = p + 4 > e
        if trunc.any():
            f = int(act[np.flatnonzero(trunc)[0]])
            raise FormatError(f"{key}[{f}]: vlen-bytes frame truncated at the length of item {j} of {int(counts[f])}")
        ln = u32[p].astype(np.int64)
        p = p + 4
        end = p + ln
        bad = end > e
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            f = int(act[i])
            raise FormatError(f"{key}[{f}]: vlen-bytes item {j} of {int(counts[f])} declares {int(ln[i])} bytes, "
                              f"only {int(ends[f] - p[i])} remain")
        slot = first + j if same else first[act] + j
        item_starts[slot] = p
        item_lengths[slot] = ln
        j += 1
        if same:
            pos = end
        else:
            pos[act] = end
            act = act[counts[act] > j]
    trailing = pos != ends
    if trailing.any():
        f = int(np.flatnonzero(trailing)[0])
        raise FormatError(f"{key}[{f}]: vlen-bytes frame has {int(ends[f] - pos[f])} trailing bytes "
                          f"after {int(counts[f])} items")
    return counts, item_starts, item_lengths


def byte_records(u8: NDArray[np.uint8], dtype: DTypeLike) -> np.ndarray:
    """View ``u8`` as overlapping records of ``dtype`` starting at every byte (gather by byte position)."""
    dt = np.dtype(dtype)
    n = u8.size - dt.itemsize + 1
    if n <= 0:
        return np.zeros(0, dtype=dt)
    return np.ndarray((n,), dtype=dt, buffer=u8, strides=(1,))


def u32_at(u8: NDArray[np.uint8], pos: NDArray[np.int64]) -> NDArray[np.int64]:
    """Little-endian u32 at each byte position (positions already bounds-checked)."""
    if pos.size == 0:
        return np.zeros(0, dtype=np.int64)
    return byte_records(u8, "<u4")[pos].astype(np.int64)
