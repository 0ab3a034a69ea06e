"""Neuroglancer's "uint64 sharded" key-value format, written one shard at a time.

A chunk id is hashed (``identity`` or ``murmurhash3_x86_128``, after
``preshift_bits``); the low ``minishard_bits`` of the hash pick the
minishard, the next ``shard_bits`` the shard file ``<shard hex>.shard``.
A shard file is: a fixed index of ``2**minishard_bits`` (start, end) pairs
(relative to the end of that index), the chunk data, then the minishard
indexes -- each a delta-coded ``[3, n]`` uint64 array (ids, offsets, sizes),
optionally gzip-compressed.  Pure numpy, no I/O: :func:`encode_shards`
yields ``(file name, bytes)`` so the caller holds one shard at a time.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError

_M32 = np.uint64(0xFFFFFFFF)


def _u32(x: np.ndarray) -> np.ndarray:
    return (x & _M32).astype(np.uint64)


def _mul(a: np.ndarray, c: int) -> np.ndarray:
    """32-bit wrapping multiply of uint32 values held in uint64 (no overflow: 32 x 32 bits)."""
    return (a * np.uint64(c)) & _M32


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return ((x << np.uint64(r)) | (x >> np.uint64(32 - r))) & _M32


def _fmix(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(16))
    h = _mul(h, 0x85EBCA6B)
    h = h ^ (h >> np.uint64(13))
    h = _mul(h, 0xC2B2AE35)
    mixed: np.ndarray = h ^ (h >> np.uint64(16))
    return mixed


def murmurhash3_x86_128_low64(keys: np.ndarray) -> np.ndarray:
    """Low 64 bits of MurmurHash3_x86_128 (seed 0) of each key's 8 little-endian bytes, vectorized.

    An 8-byte input has no full 16-byte block: only the tail (k1 = low word,
    k2 = high word) and the finalization run.
    """
    keys = np.asarray(keys, dtype=np.uint64)
    c1, c2, c3 = 0x239B961B, 0xAB0E9789, 0x38B34AE5
    k1 = _u32(keys)
    k2 = keys >> np.uint64(32)
    k2 = _mul(_rotl(_mul(k2, c2), 16), c3)
    h2 = k2
    k1 = _mul(_rotl(_mul(k1, c1), 15), c2)
    h1 = k1
    zero = np.zeros_like(keys)
    h3, h4 = zero, zero
    n = np.uint64(8)
    h1, h2, h3, h4 = h1 ^ n, h2 ^ n, h3 ^ n, h4 ^ n
    h1 = (h1 + h2 + h3 + h4) & _M32
    h2, h3, h4 = (h2 + h1) & _M32, (h3 + h1) & _M32, (h4 + h1) & _M32
    h1, h2, h3, h4 = _fmix(h1), _fmix(h2), _fmix(h3), _fmix(h4)
    h1 = (h1 + h2 + h3 + h4) & _M32
    h2 = (h2 + h1) & _M32
    low64: np.ndarray = h1 | (h2 << np.uint64(32))
    return low64


@dataclass(frozen=True)
class ShardingSpec:
    """A ``neuroglancer_uint64_sharded_v1`` sharding specification."""

    shard_bits: int
    minishard_bits: int
    hash: str = "murmurhash3_x86_128"
    preshift_bits: int = 0
    minishard_index_encoding: str = "gzip"
    data_encoding: str = "raw"

    def __post_init__(self) -> None:
        if self.hash not in ("identity", "murmurhash3_x86_128"):
            raise InvalidArgumentError(f"sharding hash must be 'identity' or 'murmurhash3_x86_128', got {self.hash!r}")
        for name in ("minishard_index_encoding", "data_encoding"):
            if getattr(self, name) not in ("raw", "gzip"):
                raise InvalidArgumentError(f"sharding {name} must be 'raw' or 'gzip', got {getattr(self, name)!r}")
        for name in ("shard_bits", "minishard_bits", "preshift_bits"):
            value = getattr(self, name)
            if not 0 <= value <= 64:
                raise InvalidArgumentError(f"sharding {name} must be in [0, 64], got {value!r}")
        if self.shard_bits + self.minishard_bits > 64:
            raise InvalidArgumentError("sharding shard_bits + minishard_bits must be <= 64")

    def to_json(self) -> dict[str, Any]:
        return {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": self.preshift_bits, "hash": self.hash,
                "minishard_bits": self.minishard_bits, "shard_bits": self.shard_bits,
                "minishard_index_encoding": self.minishard_index_encoding, "data_encoding": self.data_encoding}

    def locate(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shard, minishard) of each uint64 key."""
        h = np.asarray(keys, dtype=np.uint64) >> np.uint64(self.preshift_bits)
        if self.hash == "murmurhash3_x86_128":
            h = murmurhash3_x86_128_low64(h)
        mini = h & np.uint64((1 << self.minishard_bits) - 1)
        shard = (h >> np.uint64(self.minishard_bits)) & np.uint64((1 << self.shard_bits) - 1)
        return shard, mini

    def shard_name(self, shard: int) -> str:
        digits = -(-self.shard_bits // 4)
        return f"{shard:0{digits}x}.shard"


def choose_spec(n_keys: int, total_bytes: int, *, hash: str = "murmurhash3_x86_128",
                shard_bytes: int = 64 << 20, keys_per_minishard: int = 256) -> ShardingSpec:
    """Bits giving shards of about ``shard_bytes`` and minishard indexes of about ``keys_per_minishard`` ids.

    One shard file per ~64 MiB keeps a viewer's index fetch small while
    storage sees few objects; minishards of a few hundred ids keep each
    minishard index read (after the fixed shard index) to a few KiB.
    """
    shard_bits = max(0, int(np.ceil(np.log2(max(1.0, total_bytes / shard_bytes)))))
    per_shard = max(1.0, n_keys / (1 << shard_bits))
    minishard_bits = max(0, int(np.ceil(np.log2(max(1.0, per_shard / keys_per_minishard)))))
    return ShardingSpec(shard_bits=min(shard_bits, 32), minishard_bits=min(minishard_bits, 20), hash=hash)


def _encode(data: bytes, encoding: str) -> bytes:
    return gzip.compress(data, compresslevel=6, mtime=0) if encoding == "gzip" else data


def encode_shards(spec: ShardingSpec, keys: np.ndarray,
                  payloads: Callable[[np.ndarray], Sequence[bytes]]) -> Iterator[tuple[str, bytes]]:
    """``(file name, shard bytes)`` for every non-empty shard.

    ``payloads(rows)`` returns the values of ``keys[rows]`` (called once per
    shard, so values may come from a memory map or a spill file); keys must be
    unique.  Within a minishard chunks are stored in ascending id order.
    """
    keys = np.asarray(keys, dtype=np.uint64)
    if len(np.unique(keys)) != len(keys):
        raise InvalidArgumentError("sharded keys must be unique")
    shard, mini = spec.locate(keys)
    order = np.lexsort((keys, mini, shard))
    n_mini = 1 << spec.minishard_bits
    bounds = np.flatnonzero(np.diff(shard[order])) + 1
    for part in np.split(order, bounds):
        if not len(part):
            continue
        values = [_encode(bytes(v), spec.data_encoding) for v in payloads(part)]
        sizes = np.array([len(v) for v in values], dtype=np.uint64)
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.uint64)  # relative to index end
        data_len = int(sizes.sum())
        part_mini = mini[part]
        index = np.zeros((n_mini, 2), dtype="<u8")
        minis: list[bytes] = []
        pos = data_len
        cuts = np.flatnonzero(np.diff(part_mini)) + 1
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(part)]):
            ids = keys[part[lo:hi]]
            table = np.empty((3, hi - lo), dtype="<u8")
            table[0] = np.diff(ids, prepend=np.uint64(0))
            st = starts[lo:hi]
            ends_prev = np.concatenate(([np.uint64(0)], st[:-1] + sizes[lo:hi - 1])).astype(np.uint64)
            table[1] = st - ends_prev
            table[2] = sizes[lo:hi]
            enc = _encode(table.tobytes(), spec.minishard_index_encoding)
            index[int(part_mini[lo])] = (pos, pos + len(enc))
            pos += len(enc)
            minis.append(enc)
        yield spec.shard_name(int(shard[part[0]])), b"".join([index.tobytes(), *values, *minis])


def compressed_morton(cells: np.ndarray, grid_shape: Sequence[int] | np.ndarray) -> np.ndarray:
    """Compressed Morton code of grid cells: interleave only the bits each dimension needs."""
    cells = np.asarray(cells, dtype=np.uint64).reshape(-1, len(grid_shape))
    out = np.zeros(len(cells), dtype=np.uint64)
    j = 0
    for bit in range(64):
        for d, size in enumerate(grid_shape):
            if (int(size) - 1) >> bit:
                out |= ((cells[:, d] >> np.uint64(bit)) & np.uint64(1)) << np.uint64(j)
                j += 1
    return out
