"""Sort rows into chunks and fragments the way the on-disk layout wants them.

Every row gets one int64 code -- its chunk's C-order number (absolute chunk
coordinates), then its bin or object rank inside the chunk -- and one sort
of the codes puts every row in its final place, input order kept within a
fragment.  The result is a set of slices, so payloads are cut from the
sorted rows without any per-row Python work.

The sort packs each row's input index into the low bits of its code, so a
plain (SIMD) integer sort of distinct values yields the stable order; no
lexsort and no comparison of (N, ndim) coordinates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..format.grid import CellCodes


@dataclass(frozen=True)
class Partition:
    """Rows sorted into chunks, each chunk cut into consecutive fragments."""

    order: np.ndarray  # (N,) input row of each sorted row
    chunks: np.ndarray  # (K, ndim) absolute chunk coords, ascending C order
    chunk_starts: np.ndarray  # (K + 1,) sorted-row offsets of each chunk
    frag_chunk: np.ndarray  # (F,) chunk position of each fragment
    frag_starts: np.ndarray  # (F,) first row of each fragment, local to its chunk
    frag_counts: np.ndarray  # (F,) rows in each fragment
    frag_keys: np.ndarray  # (F,) bin flat index or object id the fragment stands for

    def chunk_fragments(self, k: int) -> slice:
        """Fragment positions of chunk ``k`` (fragments are grouped by chunk)."""
        lo, hi = np.searchsorted(self.frag_chunk, [k, k + 1])
        return slice(int(lo), int(hi))


def sort_codes(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stable sort of non-negative int64 codes: (order, distinct codes ascending, their start offsets + [N]).

    ``code << bits | row`` values are distinct, so any sort gives the stable
    order; when they do not fit 63 bits a stable argsort does the same.
    ``codes`` is overwritten (it becomes the sorted codes).
    """
    n = len(codes)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(1, np.int64)
    bits = max(1, (n - 1).bit_length())
    top = int(codes.max())
    if top < 1 << (63 - bits):
        packed = codes
        for s in range(0, n, 1 << 16):  # in place, a cache-sized block at a time
            block = packed[s:s + (1 << 16)]
            block <<= bits
            block |= np.arange(s, s + len(block), dtype=np.int64)
        packed.sort()
        order = packed & ((1 << bits) - 1)
        sorted_codes = np.right_shift(packed, bits, out=packed)
    else:
        order = np.argsort(codes, kind="stable")
        sorted_codes = codes[order]
    starts = np.flatnonzero(sorted_codes[1:] != sorted_codes[:-1]) + 1
    ucodes = np.concatenate((sorted_codes[:1], sorted_codes[starts]))
    return order, ucodes, np.concatenate(([0], starts, [n])).astype(np.int64)


def partition_codes(cells: CellCodes, keys: np.ndarray | None = None, *, all_keys: bool = False) -> Partition:
    """Partition rows by their cell codes (see :meth:`Grid.cell_codes`).

    Placed by bin (``cells.per_chunk`` bins, ``all_keys``): every bin of an
    occupied chunk gets a fragment, empty ones with count 0, as 0.9.2
    writes.  Otherwise ``keys`` (object ids, one per row) cut each chunk into
    one fragment per distinct key, keys ascending; ``keys`` None: one
    fragment per cell code.  ``cells.codes`` is sorted in place (consumed).
    """
    codes = cells.codes
    n = len(codes)
    per = cells.per_chunk
    uniq = inverse = None
    if keys is not None and n:
        uniq, inverse = np.unique(keys, return_inverse=True)
        per = len(uniq)
        if (int(codes.max()) + 1) * per >= 1 << 62:  # too wide to combine: rank the chunks first
            occupied, codes = np.unique(codes, return_inverse=True)
            cells = CellCodes(codes.reshape(-1), 1, None, None, cells.chunk_coords(occupied))
        codes = codes * per + inverse.reshape(-1)
    order, ucodes, starts = sort_codes(codes)
    chunk_no = ucodes // per
    new_chunk = np.ones(len(chunk_no), dtype=bool)
    new_chunk[1:] = chunk_no[1:] != chunk_no[:-1]
    chunk_first = np.flatnonzero(new_chunk)  # first distinct code of each occupied chunk
    chunks = cells.chunk_coords(chunk_no[chunk_first]).astype(np.int64)
    chunk_starts = np.append(starts[chunk_first], n).astype(np.int64)
    nk = len(chunk_first)
    counts = np.diff(starts)
    if all_keys:
        grid = np.zeros((nk, per), np.int64)
        grid[np.cumsum(new_chunk) - 1, ucodes % per] = counts
        frag_chunk = np.repeat(np.arange(nk, dtype=np.int64), per)
        frag_keys = np.tile(np.arange(per, dtype=np.int64), nk)
        frag_starts = (np.cumsum(grid, axis=1) - grid).reshape(-1)
        frag_counts = grid.reshape(-1)
    else:
        frag_chunk = (np.cumsum(new_chunk) - 1).astype(np.int64)
        frag_keys = ucodes % per if uniq is None else uniq[ucodes % per].astype(np.int64)
        frag_starts = starts[:-1] - chunk_starts[frag_chunk]
        frag_counts = counts
    return Partition(order.astype(np.int64, copy=False), chunks, chunk_starts, frag_chunk,
                     frag_starts.astype(np.int64), frag_counts.astype(np.int64), frag_keys.astype(np.int64))


def partition(chunks: np.ndarray, keys: np.ndarray, *, all_keys: int | None = None) -> Partition:
    """Partition rows given each row's absolute chunk coords and fragment key.

    ``keys`` is a bin index (``all_keys`` = bins per chunk: every bin gets a
    fragment, empty ones with count 0, as 0.9.2 writes) or an object id
    (``all_keys`` None: one fragment per distinct key present in the chunk).
    """
    chunks = np.asarray(chunks, dtype=np.int64)
    n, ndim = chunks.shape
    if n == 0:
        cells = CellCodes(np.zeros(0, np.int64), all_keys or 1, np.zeros(ndim, np.int64), np.ones(ndim, np.int64))
    else:
        first = chunks.min(axis=0)
        span = chunks.max(axis=0) - first + 1
        if int(np.prod(span.astype(object))) * (all_keys or 1) < 1 << 62:
            number = np.ravel_multi_index(tuple((chunks - first).T), tuple(int(s) for s in span))
            cells = CellCodes(number.astype(np.int64), 1, first, span)
        else:
            table, number = np.unique(chunks, axis=0, return_inverse=True)
            cells = CellCodes(number.reshape(-1).astype(np.int64), 1, None, None, table)
    if all_keys is None:
        return partition_codes(cells, np.asarray(keys))
    codes = cells.codes * all_keys + np.asarray(keys, dtype=np.int64)
    return partition_codes(CellCodes(codes, all_keys, cells.first, cells.span, cells.table), all_keys=True)
