"""The vectorized write paths (block-wise placement, code sort, threaded encoding) give
exactly what the plain formulas give: same chunks, bins, row order and fragments."""

from __future__ import annotations

import numpy as np
import pytest

from zvf.format.grid import Grid, dense_ids
from zvf.write.partition import partition, partition_codes
from zvf.write.store_writer import ordered_map


def plain_bin_of(grid: Grid, pos):
    """The placement rule written out on the whole array (float64 division, then integers)."""
    bins = np.floor(np.asarray(pos).astype(np.float64) / np.asarray(grid.effective_bin_shape)).astype(np.int64)
    bpc = np.asarray(grid.bins_per_chunk, dtype=np.int64)
    chunks = np.floor_divide(bins, bpc)
    return chunks, grid.flat_bin(bins - chunks * bpc)


def plain_partition(chunks, keys, all_keys=None):
    """Rows by (chunk C order, key), stable: (order, chunks, chunk_starts, per-fragment key, start, count)."""
    order = np.lexsort((keys, *tuple(chunks[:, d] for d in range(chunks.shape[1] - 1, -1, -1))))
    sc, sk = chunks[order], np.asarray(keys)[order]
    uchunks, first = np.unique(sc, axis=0, return_index=True)
    starts = np.append(np.sort(first), len(order))
    frags = []
    for k in range(len(uchunks)):
        lo, hi = starts[k], starts[k + 1]
        ks = np.arange(all_keys) if all_keys else np.unique(sk[lo:hi])
        for key in ks:
            sel = np.flatnonzero(sk[lo:hi] == key)
            frags.append((k, int(key), int(sel[0]) if len(sel) else int(np.sum(sk[lo:hi] < key)), len(sel)))
    return order, uchunks, starts, frags


def check(part, want):
    order, uchunks, starts, frags = want
    assert np.array_equal(part.order, order)
    assert np.array_equal(part.chunks, uchunks)
    assert np.array_equal(part.chunk_starts, starts)
    got = list(zip(part.frag_chunk.tolist(), part.frag_keys.tolist(), part.frag_starts.tolist(),
                   part.frag_counts.tolist()))
    assert got == frags


def random_case(rng, n):
    ndim = int(rng.integers(1, 4))
    chunk = rng.choice([1.0, 3.3, 0.7, 125.0], ndim)
    grid = Grid.create(chunk, chunk / rng.integers(1, 4, ndim), ndim=ndim)
    dtype = rng.choice([np.float16, np.float32, np.float64])
    pos = (rng.normal(size=(n, ndim)) * rng.choice([1, 10, 1000])).astype(dtype)
    seam = rng.integers(-5, 5, (n // 2, ndim)) * np.asarray(grid.effective_bin_shape)
    pos[: n // 2] = seam.astype(dtype)  # values on bin and chunk edges
    return grid, pos


@pytest.mark.parametrize("seed", range(12))
def test_placement_and_partition_match_the_plain_rules(seed):
    rng = np.random.default_rng(seed)
    grid, pos = random_case(rng, int(rng.integers(1, 2500)))
    chunks, flat = grid.bin_of(pos)
    want_chunks, want_flat = plain_bin_of(grid, pos)
    assert np.array_equal(chunks, want_chunks) and np.array_equal(flat, want_flat)
    by_bins = plain_partition(want_chunks, want_flat, grid.bins_in_chunk)
    check(partition(chunks, flat, all_keys=grid.bins_in_chunk), by_bins)
    check(partition_codes(grid.cell_codes(pos, by_bin=True), all_keys=True), by_bins)

    oids = rng.integers(-3, int(rng.integers(1, 40)), len(pos))
    by_chunk = grid.chunk_of(pos)
    assert np.array_equal(by_chunk, np.floor(pos.astype(np.float64) / np.asarray(grid.chunk_shape)))
    by_ids = plain_partition(by_chunk, oids)
    check(partition(by_chunk, oids), by_ids)
    check(partition_codes(grid.cell_codes(pos, by_bin=False), oids), by_ids)


def test_many_blocks():
    """More rows than one placement block (65,536), float32 on seams of a non-power-of-two grid."""
    rng = np.random.default_rng(7)
    grid = Grid.create([3.3, 1.0, 7.0], [1.1, 0.5, 7.0])
    pos = (rng.normal(size=(150_000, 3)) * 40).astype(np.float32)
    pos[:50_000] = (rng.integers(-30, 30, (50_000, 3)) * [1.1, 0.5, 7.0]).astype(np.float32)
    chunks, flat = plain_bin_of(grid, pos)
    part = partition_codes(grid.cell_codes(pos, by_bin=True), all_keys=True)
    ref = partition(chunks, flat, all_keys=grid.bins_in_chunk)
    for name in ("order", "chunks", "chunk_starts", "frag_chunk", "frag_starts", "frag_counts", "frag_keys"):
        assert np.array_equal(getattr(part, name), getattr(ref, name)), name
    assert np.array_equal(chunks[part.order[part.chunk_starts[:-1]]], part.chunks)


def test_huge_coordinates_fall_back_exactly():
    """Bins beyond 2**52 and a chunk box too large to number: integer arithmetic, ranked chunks."""
    grid = Grid.create([1.0, 1.0], [0.5, 0.25])
    pos = np.array([[1e17, -1e17], [3.0, 4.0], [-1e17, 2.5], [3.2, 4.1]])
    chunks, flat = grid.bin_of(pos)
    want_chunks, want_flat = plain_bin_of(grid, pos)
    assert np.array_equal(chunks, want_chunks) and np.array_equal(flat, want_flat)
    check(partition_codes(grid.cell_codes(pos, by_bin=True), all_keys=True),
          plain_partition(want_chunks, want_flat, grid.bins_in_chunk))
    ids = np.array([5, 1, 2, 0])
    check(partition_codes(grid.cell_codes(pos, by_bin=False), ids), plain_partition(grid.chunk_of(pos), ids))
    sparse = Grid.create([1e-6] * 3)
    far = np.array([[0, 0, 0], [1e6, 1e6, 1e6], [5, 5, 5], [0, 0, 0]], np.float64)
    check(partition(sparse.chunk_of(far), np.array([3, 1, 2, 0])),
          plain_partition(sparse.chunk_of(far), np.array([3, 1, 2, 0])))


def test_empty_inputs():
    grid = Grid.create([1.0, 1.0], [0.5, 0.5])
    part = partition_codes(grid.cell_codes(np.zeros((0, 2), np.float32), by_bin=True), all_keys=True)
    assert part.chunks.shape == (0, 2) and len(part.order) == 0 and list(part.chunk_starts) == [0]
    part = partition(np.zeros((0, 3), np.int64), np.zeros(0, np.int64))
    assert part.chunks.shape == (0, 3) and len(part.frag_keys) == 0


async def test_ordered_map_keeps_order_and_raises_the_first_error():
    seen = []

    def work(i):
        return i * i

    async def consume(i, v):
        seen.append((i, v))

    await ordered_map(range(50), work, consume, workers=3)
    assert seen == [(i, i * i) for i in range(50)]

    def failing(i):
        if i == 7:
            raise ValueError("cell 7")
        return i

    seen.clear()
    with pytest.raises(ValueError, match="cell 7"):
        await ordered_map(range(40), failing, consume, workers=2)
    assert [i for i, _ in seen] == list(range(7))


@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
def test_dense_ids_are_np_unique_rows(ndim):
    """Distinct chunks by a dense table over their box: np.unique(axis=0)'s rows, order and inverse."""
    rng = np.random.default_rng(ndim)
    coords = rng.integers(-7, 9, (5000, ndim)).astype(np.int64)
    coords[:10] = coords[-1]  # repeats across the table
    rows, inverse = dense_ids(coords, 1 << 20)
    want, want_inv = np.unique(coords, axis=0, return_inverse=True)
    assert rows.dtype == np.int64 and np.array_equal(rows, want)
    assert np.array_equal(inverse, want_inv.reshape(-1))
    one = dense_ids(coords[:1], 1)
    assert one is not None and np.array_equal(one[0], coords[:1]) and one[1].tolist() == [0]
    far = np.array([[0] * ndim, [10**7] * ndim], dtype=np.int64)
    assert dense_ids(far, 1 << 20) is None  # a box too big for a table: the caller sorts instead
    extreme = np.array([[np.iinfo(np.int64).min] * ndim, [np.iinfo(np.int64).max] * ndim])
    assert dense_ids(extreme, 1 << 20) is None  # its span overflows int64: still refused, not wrapped
