"""Link cells under ``<level>/links/<delta>/<offsets>/``.

Which layout a cell uses depends on its array, not its bytes:

* **Intra** (``delta == 0`` and every offset zero: ``0.0.0``, ``0.0.0_0.0.0``):
  the payload is flat little-endian rows, ``link_width`` integers of the
  array's ``dtype`` attribute (int64 in every 0.9.2 store), no header.  Values
  are row indices into this chunk's ``vertices``.  ``link_fragments/<chunk>``
  (a fragment index, see :mod:`.fragments`) partitions these rows.

* **Ragged** (every other cell: cross-chunk offsets such as ``0.+1.0`` or
  ``+1.0.0_+1.-1.0``, and every cell of a ``links/+1`` / ``links/-1``
  family, including their ``0.0.0``)::

      i64 K                  number of groups (0.9.2 writes 1 for a fresh cell)
      i64 byte_offsets[K]    start of group k inside DATA, in bytes
      DATA                   rows of W = link_width + has_perm integers of ``dtype``

  Group k spans ``DATA[byte_offsets[k] : byte_offsets[k+1]]`` (the last one
  runs to the end); 0.9.2 appends to a cell by adding a group.  Rows are
  row-major: when the array attribute ``has_perm`` is true, column 0 of each
  row is ``perm`` and columns ``1..L`` the endpoints' local vertex indices;
  otherwise all W = L columns are vertex indices.  The header is always
  int64; only DATA uses ``dtype``.  An empty payload (the vlen fill value)
  means no rows; 0.9.2 writes ``K = 0`` (8 bytes) for an empty group list.

  Endpoint 0 of a stored row lives in the cell's own (source) chunk;
  endpoint j >= 1 lives in chunk ``anchor + offsets[j-1]``.  At delta 0 the
  anchor is the source chunk.  On ``delta != 0`` families endpoints ``1..``
  live at level ``level + delta`` and 0.9.2 re-anchors the source into that
  level's chunk grid: ``anchor = floor(c_src * r_src / r_trg)`` per axis,
  ``r_L`` being level L's chunk_shape as a multiple of the root chunk_shape
  (so anchor == source chunk when levels share a chunk_shape, as in every
  fixture).

  ``has_perm`` (0.9.2): false for intra arrays, for every ``delta != 0``
  array and for directed families; true for undirected cross-chunk arrays
  (and ``store == "duplicate"`` families).  ``perm`` is the Lehmer code of
  the permutation ``sigma`` that sorted the input endpoints into stored
  order (canonical order: ascending ``(chunk coords, vertex index)``), so
  ``stored[k] = input[sigma[k]]``; ``perm = 0`` is the identity.  Use
  :func:`lehmer_decode` / :func:`unpermute` to restore input order
  (edge direction, face winding).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike, NDArray

from ..errors import FormatError, InvalidArgumentError
from .vlen import as_u8

if TYPE_CHECKING:
    from .types import BytesLike

__all__ = [
    "decode_intra_links",
    "decode_ragged_links",
    "decode_ragged_links_groups",
    "encode_intra_links",
    "encode_ragged_links",
    "is_intra_offsets",
    "lehmer_decode",
    "lehmer_encode",
    "unpermute",
]


def _int_dtype(dtype: DTypeLike, key: str) -> np.dtype[Any]:
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise FormatError(f"{key}: link dtype {dtype!r} is not a numpy dtype") from exc
    if dt.kind not in "iu":
        raise FormatError(f"{key}: link dtype {dt} is not an integer type")
    return dt.newbyteorder("<")


def is_intra_offsets(offsets: ArrayLike) -> bool:
    """True for an all-zero offsets list (the flat ``0.0.0`` layout when delta is 0)."""
    return not np.any(np.asarray(offsets))


def encode_intra_links(rows: ArrayLike, *, dtype: DTypeLike = "int64") -> bytes:
    """Flat rows (M, L) -> payload bytes."""
    dt = _int_dtype(dtype, "dtype")
    a = np.asarray(rows)
    if a.ndim != 2:
        raise InvalidArgumentError(f"rows: expected (M, link_width), got shape {a.shape}")
    if a.size and (a.min() < 0 or ((dt.kind == "u" or dt.itemsize < 8) and a.max() > np.iinfo(dt).max)):
        raise InvalidArgumentError(f"rows: values do not fit {dt} or are negative")
    return np.ascontiguousarray(a, dtype=dt).tobytes()


def decode_intra_links(
    buf: BytesLike, width: int, *, key: str = "?", dtype: DTypeLike = "int64", n_rows: int | None = None
) -> NDArray[np.int64]:
    """Payload -> int64 rows (M, width); with ``n_rows`` every index must be in ``[0, n_rows)``."""
    if width < 1:
        raise InvalidArgumentError(f"width: link width must be >= 1, got {width}")
    dt = _int_dtype(dtype, key)
    u8 = as_u8(buf)
    row_bytes = width * dt.itemsize
    if u8.size % row_bytes:
        raise FormatError(
            f"{key}: intra link cell is {u8.size} bytes, not a multiple of the {row_bytes}-byte row "
            f"({width} x {dt})"
        )
    rows = np.frombuffer(u8, dtype=dt).astype(np.int64).reshape(-1, width)
    if rows.size:
        if rows.min() < 0:
            r = int(np.flatnonzero((rows < 0).any(axis=1))[0])
            raise FormatError(f"{key}: link row {r} has a negative vertex index {rows[r].tolist()}")
        if n_rows is not None and rows.max() >= n_rows:
            r = int(np.flatnonzero((rows >= n_rows).any(axis=1))[0])
            raise FormatError(
                f"{key}: link row {r} {rows[r].tolist()} points past the chunk's {int(n_rows)} vertices"
            )
    return rows


def encode_ragged_links(
    rows: ArrayLike, perm: ArrayLike | None = None, *, dtype: DTypeLike = "int64", group_sizes: ArrayLike | None = None
) -> bytes:
    """Rows (M, L) [+ perm (M,)] -> ragged payload.

    One group (K = 1, what 0.9.2 writes for a fresh cell) unless
    ``group_sizes`` (rows per group) is given.
    """
    dt = _int_dtype(dtype, "dtype")
    a = np.asarray(rows)
    if a.ndim != 2:
        raise InvalidArgumentError(f"rows: expected (M, link_width), got shape {a.shape}")
    m = a.shape[0]
    if perm is not None:
        p = np.asarray(perm).reshape(-1)
        if p.size != m:
            raise InvalidArgumentError(f"perm: {p.size} values for {m} rows")
        a = np.concatenate((p.astype(np.int64)[:, None], a.astype(np.int64)), axis=1)
    data = np.ascontiguousarray(a, dtype=dt)
    row_bytes = data.shape[1] * dt.itemsize
    if group_sizes is None:
        sizes = np.array([m], dtype=np.int64)
    else:
        sizes = np.asarray(group_sizes, dtype=np.int64).reshape(-1)
        if sizes.size and (sizes.min() < 0 or sizes.sum() != m):
            raise InvalidArgumentError(f"group_sizes: must be >= 0 and sum to {m}")
    header = np.empty(1 + sizes.size, dtype="<i8")
    header[0] = sizes.size
    header[1:] = (np.cumsum(sizes) - sizes) * row_bytes
    return header.tobytes() + data.tobytes()


def decode_ragged_links_groups(
    buf: BytesLike, width: int, has_perm: bool, *, key: str = "?", dtype: DTypeLike = "int64"
) -> tuple[NDArray[np.int64], NDArray[np.int64] | None, NDArray[np.int64]]:
    """Ragged payload -> (rows int64 (M, width), perm int64 (M,) or None, group row offsets (K+1,)).

    ``width`` is the link width L (without the perm column).
    """
    if width < 1:
        raise InvalidArgumentError(f"width: link width must be >= 1, got {width}")
    dt = _int_dtype(dtype, key)
    u8 = as_u8(buf)
    size = u8.size
    w = width + (1 if has_perm else 0)
    row_bytes = w * dt.itemsize
    if size == 0:
        return np.zeros((0, width), np.int64), (np.zeros(0, np.int64) if has_perm else None), np.zeros(1, np.int64)
    if size < 8:
        raise FormatError(f"{key}: ragged link cell is {size} bytes, shorter than its i64 group count")
    k = int(np.frombuffer(u8, dtype="<i8", count=1)[0])
    if k < 0 or k > (size - 8) // 8:
        raise FormatError(f"{key}: ragged link cell declares {k} groups but is only {size} bytes")
    offs = np.frombuffer(u8, dtype="<i8", count=k, offset=8).astype(np.int64)
    data_start = 8 + 8 * k
    data_len = size - data_start
    if data_len % row_bytes:
        raise FormatError(
            f"{key}: ragged link data is {data_len} bytes, not a multiple of the {row_bytes}-byte row "
            f"({w} x {dt})"
        )
    if k == 0:
        if data_len:
            raise FormatError(f"{key}: ragged link cell has 0 groups but {data_len} data bytes")
    else:
        if offs[0] != 0:
            raise FormatError(f"{key}: ragged link group 0 starts at byte {int(offs[0])}, expected 0")
        bad = (np.diff(offs) < 0) | (offs[1:] > data_len)
        if bad.any():
            g = int(np.flatnonzero(bad)[0]) + 1
            raise FormatError(
                f"{key}: ragged link group {g} byte offset {int(offs[g])} is out of order or past the "
                f"{data_len}-byte data"
            )
        mis = offs % row_bytes != 0
        if mis.any():
            g = int(np.flatnonzero(mis)[0])
            raise FormatError(
                f"{key}: ragged link group {g} starts at byte {int(offs[g])}, not on a {row_bytes}-byte row"
            )
    full = np.frombuffer(u8, dtype=dt, offset=data_start).astype(np.int64).reshape(-1, w)
    m = full.shape[0]
    group_rows = np.concatenate((offs // row_bytes, [m])).astype(np.int64) if k else np.zeros(1, np.int64)
    if has_perm:
        perm = full[:, 0].copy()
        rows = np.ascontiguousarray(full[:, 1:])
        if perm.size:
            limit = math.factorial(width)
            badp = (perm < 0) | (perm >= limit)
            if badp.any():
                r = int(np.flatnonzero(badp)[0])
                raise FormatError(f"{key}: ragged link row {r} perm {int(perm[r])} outside [0, {width}!)")
    else:
        perm = None
        rows = full
    if rows.size and rows.min() < 0:
        r = int(np.flatnonzero((rows < 0).any(axis=1))[0])
        raise FormatError(f"{key}: ragged link row {r} has a negative vertex index {rows[r].tolist()}")
    return rows, perm, group_rows


def decode_ragged_links(
    buf: BytesLike, width: int, has_perm: bool, *, key: str = "?", dtype: DTypeLike = "int64"
) -> tuple[NDArray[np.int64], NDArray[np.int64] | None]:
    """Ragged payload -> (rows int64 (M, width), perm int64 (M,) or None); groups concatenated."""
    rows, perm, _ = decode_ragged_links_groups(buf, width, has_perm, key=key, dtype=dtype)
    return rows, perm


def lehmer_decode(perm: ArrayLike, width: int) -> NDArray[np.int64]:
    """Lehmer codes (M,) -> permutations ``sigma`` (M, width): ``stored[k] = input[sigma[k]]``."""
    p = np.asarray(perm, dtype=np.int64).reshape(-1).copy()
    limit = math.factorial(width)
    if p.size and (p.min() < 0 or p.max() >= limit):
        raise InvalidArgumentError(f"perm: codes must lie in [0, {width}!)")
    m = p.size
    avail = np.tile(np.arange(width, dtype=np.int64), (m, 1))
    out = np.empty((m, width), dtype=np.int64)
    fact = limit
    rows = np.arange(m)
    for i in range(width):  # per column, width <= a handful
        fact //= width - i
        d = p // fact
        p %= fact
        out[:, i] = avail[rows, d]
        # drop the chosen entry: shift the tail left
        keep = np.arange(width - i - 1)[None, :] >= d[:, None]
        avail[:, : width - i - 1] = np.where(keep, avail[:, 1 : width - i], avail[:, : width - i - 1])
    return out


def lehmer_encode(sigma: ArrayLike) -> NDArray[np.int64]:
    """Permutations (M, width) -> Lehmer codes (M,)."""
    s = np.asarray(sigma, dtype=np.int64)
    if s.ndim != 2:
        raise InvalidArgumentError(f"sigma: expected (M, width), got shape {s.shape}")
    width = s.shape[1]
    # digit i = number of later entries smaller than s[:, i]
    digits = (s[:, None, :] < s[:, :, None]) & (np.arange(width)[None, None, :] > np.arange(width)[None, :, None])
    d = digits.sum(axis=2)
    weights = np.array([math.factorial(width - 1 - i) for i in range(width)], dtype=np.int64)
    codes: NDArray[np.int64] = (d * weights).sum(axis=1).astype(np.int64)
    return codes


def unpermute(rows: ArrayLike, perm: ArrayLike | None) -> NDArray[np.int64]:
    """Stored rows + perm -> endpoints in the original input order."""
    r = np.asarray(rows, dtype=np.int64)
    if perm is None:
        return r
    sigma = lehmer_decode(perm, r.shape[1])
    out = np.empty_like(r)
    np.put_along_axis(out, sigma, r, axis=1)
    return out
