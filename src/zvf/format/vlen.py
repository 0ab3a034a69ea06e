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

import numpy as np

from ..errors import FormatError, InvalidArgumentError

__all__ = [
    "encode_vlen",
    "encode_vlen_packed",
    "decode_vlen",
    "decode_vlen_spans",
    "as_u8",
    "byte_view",
]

_U32 = struct.Struct("<I")
_MAX_ITEM = 0xFFFFFFFF


def as_u8(buf) -> np.ndarray:
    """A read-only ``uint8`` view of any contiguous bytes-like object (no copy)."""
    if isinstance(buf, np.ndarray):
        if buf.dtype == np.uint8 and buf.ndim == 1:
            return buf
        if not buf.flags.c_contiguous:
            buf = np.ascontiguousarray(buf)
        return buf.reshape(-1).view(np.uint8)
    return np.frombuffer(buf, dtype=np.uint8)


def byte_view(buf) -> memoryview:
    """A flat ``'B'`` memoryview of any bytes-like object (copies only if non-contiguous)."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if mv.format == "B" and mv.ndim == 1 and mv.c_contiguous:
        return mv
    if not mv.c_contiguous:
        mv = memoryview(mv.tobytes())
    return mv.cast("B")


def _nbytes(item) -> int:
    if isinstance(item, (bytes, bytearray)):
        return len(item)
    return memoryview(item).nbytes


def encode_vlen(items: Sequence) -> bytes:
    """Frame ``items`` (bytes-like) as one vlen-bytes chunk."""
    parts: list = [_U32.pack(len(items))]
    for i, item in enumerate(items):
        n = _nbytes(item)
        if n > _MAX_ITEM:
            raise InvalidArgumentError(f"items[{i}]: {n} bytes exceed the u32 length prefix")
        parts.append(_U32.pack(n))
        parts.append(item if isinstance(item, (bytes, bytearray, memoryview)) else memoryview(item))
    return b"".join(parts)


def encode_vlen_packed(data, offsets) -> bytes:
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


def decode_vlen_spans(buf, *, key: str = "?", expected: int | None = None) -> tuple[np.ndarray, np.ndarray]:
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


def decode_vlen(buf, *, key: str = "?", expected: int | None = None) -> list[memoryview]:
    """Split a vlen-bytes frame into zero-copy item views."""
    mv = byte_view(buf)
    starts, lengths = decode_vlen_spans(mv, key=key, expected=expected)
    return [mv[s : s + n] for s, n in zip(starts.tolist(), lengths.tolist())]
