"""``sharding_indexed`` shards as zarr-python 3.1 / zarr-vectors 0.9.2 write them.

A shard object is the concatenated inner chunks followed by the index
(``index_location: "end"``)::

    n_inner x (u64 offset, u64 nbytes)   little endian, C order over the
                                         shard's inner grid; an absent inner
                                         chunk is (2^64-1, 2^64-1)
    u32 crc32c(index entries)            little endian (Castagnoli)

Offsets are relative to the start of the shard object.  zarr writes the
inner chunks in Morton order (first axis = lowest bit), not index order;
:func:`encode_shard` does the same when given ``inner_shape`` so that its
output is byte-identical to zarr's.  When every inner chunk is absent zarr
writes no object at all: :func:`encode_shard` then returns ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import FormatError, InvalidArgumentError
from .vlen import as_u8

if TYPE_CHECKING:
    from .types import BytesLike

__all__ = [
    "EMPTY",
    "crc32c",
    "decode_shard_index",
    "encode_shard",
    "encode_shard_index",
    "index_nbytes",
    "inner_index",
    "morton_order",
    "shard_coords",
]

EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)


def crc32c(data: BytesLike) -> int:
    import google_crc32c

    return int(google_crc32c.value(bytes(as_u8(data))))


def index_nbytes(n_inner: int) -> int:
    """Size of the shard index for ``n_inner`` inner chunks (16 per entry + 4 crc)."""
    return 16 * int(n_inner) + 4


def decode_shard_index(
    buf: BytesLike, n_inner: int, *, key: str = "?", shard_size: int | None = None, location: str = "end"
) -> tuple[NDArray[np.uint64], NDArray[np.uint64]]:
    """Index -> (offsets uint64[n_inner], nbytes uint64[n_inner]); absent = 2^64-1 in both.

    ``buf`` is the index itself or a whole shard (then the index is taken from
    its end -- or start for ``location="start"`` -- and ``shard_size``
    defaults to ``len(buf)``).  With a known ``shard_size`` every present
    entry must lie inside the shard outside the index.
    """
    u8 = as_u8(buf)
    need = index_nbytes(n_inner)
    if n_inner < 0:
        raise InvalidArgumentError(f"n_inner: must be >= 0, got {n_inner}")
    if u8.size < need:
        raise FormatError(f"{key}: shard index needs {need} bytes for {n_inner} inner chunks, got {u8.size}")
    if u8.size > need:
        if shard_size is None:
            shard_size = int(u8.size)
        idx = u8[:need] if location == "start" else u8[u8.size - need :]
    else:
        idx = u8
    body = idx[: need - 4]
    stored = int(np.frombuffer(idx, dtype="<u4", count=1, offset=need - 4)[0])
    actual = crc32c(body)
    if stored != actual:
        raise FormatError(f"{key}: shard index checksum mismatch (stored 0x{stored:08X}, computed 0x{actual:08X})")
    ent = np.frombuffer(body, dtype="<u8").reshape(-1, 2)
    offsets = ent[:, 0].astype(np.uint64)
    nbytes = ent[:, 1].astype(np.uint64)
    e_off = offsets == EMPTY
    e_len = nbytes == EMPTY
    half = e_off != e_len
    if half.any():
        i = int(np.flatnonzero(half)[0])
        raise FormatError(f"{key}: shard index entry {i} is half empty ({int(offsets[i])}, {int(nbytes[i])})")
    present = ~e_off
    if present.any():
        o = offsets[present]
        n = nbytes[present]
        limit = np.uint64(1 << 62)  # keeps o + n from wrapping
        big = (o > limit) | (n > limit)
        if big.any():
            i = int(np.flatnonzero(present)[np.flatnonzero(big)[0]])
            raise FormatError(f"{key}: shard index entry {i} ({int(offsets[i])}, {int(nbytes[i])}) is out of range")
        if shard_size is not None:
            lo = need if location == "start" else 0
            hi = int(shard_size) if location == "start" else int(shard_size) - need
            end = o + n
            bad = (o < np.uint64(lo)) | (end > np.uint64(max(hi, 0)))
            if bad.any():
                i = int(np.flatnonzero(present)[np.flatnonzero(bad)[0]])
                raise FormatError(
                    f"{key}: shard index entry {i} [{int(offsets[i])}, {int(offsets[i] + nbytes[i])}) lies "
                    f"outside the {hi - lo}-byte data region of the {int(shard_size)}-byte shard"
                )
    return offsets, nbytes


def encode_shard_index(offsets: ArrayLike, nbytes: ArrayLike) -> bytes:
    """Index entries (+crc32c) for the given per-inner-chunk offsets / sizes (2^64-1 = absent)."""
    off = np.asarray(offsets, dtype=np.uint64)
    ent = np.empty((len(off), 2), dtype="<u8")
    ent[:, 0] = off
    ent[:, 1] = np.asarray(nbytes, dtype=np.uint64)
    body = ent.tobytes()
    return body + int(crc32c(body)).to_bytes(4, "little")


def morton_order(inner_shape: Sequence[int]) -> NDArray[np.int64]:
    """C-order linear indices of a shard's inner chunks in zarr's Morton write order."""
    shape = tuple(int(s) for s in inner_shape)
    n = int(np.prod(shape)) if shape else 1
    if shape:
        coords = np.stack(np.unravel_index(np.arange(n), shape), axis=1).astype(np.int64)
    else:
        coords = np.zeros((1, 0), np.int64)
    bits = [max(int(s) - 1, 0).bit_length() for s in shape]
    code = np.zeros(n, dtype=np.int64)
    out_bit = 0
    for b in range(max(bits, default=0)):
        for d, nb in enumerate(bits):
            if b < nb:
                code |= ((coords[:, d] >> b) & 1) << out_bit
                out_bit += 1
    return np.argsort(code, kind="stable").astype(np.int64)


def encode_shard(
    inner: Mapping[int, bytes | None], n_inner: int, *, inner_shape: Sequence[int] | None = None,
    location: str = "end"
) -> bytes | None:
    """Assemble a shard from encoded inner chunks keyed by C-order inner index.

    ``None`` / empty values are absent chunks.  Returns ``None`` when nothing
    is present (delete or skip the object, as zarr does).  With
    ``inner_shape`` chunks are laid out in zarr's Morton order (byte-identical
    to zarr), otherwise in index order.
    """
    if inner_shape is not None and int(np.prod(inner_shape)) != n_inner:
        raise InvalidArgumentError(f"inner_shape {tuple(inner_shape)} does not hold {n_inner} inner chunks")
    for i in inner:
        if not 0 <= int(i) < n_inner:
            raise InvalidArgumentError(f"inner: index {i} outside [0, {n_inner})")
    present = {int(i): v for i, v in inner.items() if v is not None and len(v)}
    if not present:
        return None
    order = morton_order(inner_shape) if inner_shape is not None else np.arange(n_inner)
    offsets = np.full(n_inner, EMPTY, dtype=np.uint64)
    nbytes = np.full(n_inner, EMPTY, dtype=np.uint64)
    parts = []
    pos = index_nbytes(n_inner) if location == "start" else 0
    for i in order.tolist():  # per inner chunk of one shard
        v = present.get(i)
        if v is None:
            continue
        ln = memoryview(v).nbytes
        offsets[i] = pos
        nbytes[i] = ln
        parts.append(v)
        pos += ln
    index = encode_shard_index(offsets, nbytes)
    if location == "start":
        return index + b"".join(parts)
    return b"".join(parts) + index


def inner_index(chunk_coords: ArrayLike, chunks_per_shard: ArrayLike) -> NDArray[np.int64]:
    """C-order index of each chunk inside its shard (vectorized over rows of ``chunk_coords``)."""
    c = np.asarray(chunk_coords, dtype=np.int64)
    cps = np.asarray(chunks_per_shard, dtype=np.int64)
    local = np.mod(c, cps)
    return np.asarray(np.ravel_multi_index(tuple(np.moveaxis(local, -1, 0)), tuple(cps.tolist())), dtype=np.int64)


def shard_coords(chunk_coords: ArrayLike, chunks_per_shard: ArrayLike) -> NDArray[np.int64]:
    """Coordinates of the shard holding each chunk."""
    c = np.asarray(chunk_coords, dtype=np.int64)
    return np.floor_divide(c, np.asarray(chunks_per_shard, dtype=np.int64))
