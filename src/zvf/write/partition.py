"""Sort rows into chunks and fragments the way the on-disk layout wants them.

One stable sort puts every row in its final place: by chunk (C-order of
the absolute chunk coordinates), then by bin or by object inside the
chunk, keeping input order within a fragment.  The result is a set of
slices, so payloads are cut from the sorted arrays without any per-row
Python work.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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


def _pack(chunks: np.ndarray) -> np.ndarray:
    """One int64 per row ordering rows like a lexicographic sort of the coords."""
    lo = chunks.min(axis=0)
    span = chunks.max(axis=0) - lo + 1
    strides = np.cumprod(np.concatenate(([1], span[::-1][:-1])))[::-1]
    return (chunks - lo) @ strides


def partition(chunks: np.ndarray, keys: np.ndarray, *, all_keys: int | None = None) -> Partition:
    """Partition rows given each row's chunk and fragment key.

    ``keys`` is a bin index (``all_keys`` = bins per chunk: every bin gets a
    fragment, empty ones with count 0, as 0.9.2 writes) or an object id
    (``all_keys`` None: one fragment per distinct key present in the chunk).
    """
    n = chunks.shape[0]
    ndim = chunks.shape[1]
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Partition(empty, np.zeros((0, ndim), np.int64), np.zeros(1, np.int64), empty, empty, empty, empty)
    packed = _pack(chunks)
    # Sort by chunk, then key; stable so input order survives inside a fragment.
    order = np.lexsort((keys, packed))
    sp = packed[order]
    sk = keys[order]
    new_chunk = np.flatnonzero(np.diff(sp)) + 1
    chunk_starts = np.concatenate(([0], new_chunk, [n])).astype(np.int64)
    uchunks = chunks[order[chunk_starts[:-1]]]
    chunk_id = np.repeat(np.arange(len(chunk_starts) - 1), np.diff(chunk_starts))
    if all_keys is None:
        boundary = np.flatnonzero((np.diff(sk) != 0) | (np.diff(chunk_id) != 0)) + 1
        f_start = np.concatenate(([0], boundary)).astype(np.int64)
        f_stop = np.concatenate((boundary, [n])).astype(np.int64)
        frag_chunk = chunk_id[f_start]
        frag_keys = sk[f_start].astype(np.int64)
        frag_counts = f_stop - f_start
        frag_starts = f_start - chunk_starts[frag_chunk]
    else:
        nk = len(chunk_starts) - 1
        counts = np.bincount(chunk_id * all_keys + sk, minlength=nk * all_keys).astype(np.int64)
        frag_chunk = np.repeat(np.arange(nk), all_keys)
        frag_keys = np.tile(np.arange(all_keys, dtype=np.int64), nk)
        frag_counts = counts
        per_chunk = counts.reshape(nk, all_keys)
        frag_starts = (np.cumsum(per_chunk, axis=1) - per_chunk).reshape(-1)
    return Partition(order, uchunks.astype(np.int64), chunk_starts, frag_chunk.astype(np.int64),
                     frag_starts.astype(np.int64), frag_counts.astype(np.int64), frag_keys)
