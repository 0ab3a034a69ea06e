"""The object writers' vectorized fast paths give what their plain versions give.

Each fast path (packed integer sorts of link records, run-order cumulative sums,
packed manifest frames, the lock-free byte budget) is checked against the
straightforward computation it replaces, on random inputs.
"""

from __future__ import annotations

import anyio
import numpy as np
import pytest

from zvf.format.vlen import encode_vlen
from zvf.write import links
from zvf.write.level import _run_order
from zvf.write.objects.inputs import sorted_unique
from zvf.write.store_writer import ByteBudget, vlen_frames


@pytest.mark.parametrize("seed", range(4))
def test_place_records_coded_matches_lexsort(seed):
    rng = np.random.default_rng(seed)
    for trial in range(60):
        m, width, ndim = int(rng.integers(1, 200)), int(rng.integers(2, 6)), int(rng.integers(1, 4))
        chunks = rng.integers(-3, 3, (m, width, ndim)) * int(rng.choice([1, 7]))
        if trial % 3 == 0:
            chunks[:] = chunks[:, :1]  # every record inside one chunk
        vi = rng.integers(0, 50, (m, width))
        got = links.place_records(chunks, vi)
        want = links._place_lexsort(chunks.astype(np.int64), vi.astype(np.int64))
        for field in ("order", "vi", "perm", "cell_chunk", "cell_offsets", "starts"):
            assert np.array_equal(getattr(got, field), getattr(want, field)), (trial, field)


def test_place_records_wide_boxes_fall_back():
    chunks = np.array([[[0, 0, 0], [1 << 40, 0, 0]], [[5, 5, 5], [5, 5, 5]]], dtype=np.int64)
    vi = np.array([[3, 4], [1, 0]])
    got = links.place_records(chunks, vi)
    want = links._place_lexsort(chunks, vi)
    assert np.array_equal(got.order, want.order) and np.array_equal(got.cell_offsets, want.cell_offsets)


def test_run_order_is_arange_plus_repeat():
    rng = np.random.default_rng(3)
    for _ in range(200):
        counts = rng.integers(0, 6, int(rng.integers(1, 30)))
        n = int(counts.sum())
        first = np.cumsum(counts) - counts
        shift = rng.integers(-20, 40, counts.size)
        got = _run_order(n, shift, first, np.dtype(np.int64))
        assert np.array_equal(got, np.arange(n) + np.repeat(shift, counts))


def test_vlen_frames_match_encode_vlen():
    rng = np.random.default_rng(4)
    for _ in range(100):
        items = [rng.integers(0, 256, int(rng.integers(0, 12))).astype(np.uint8).tobytes()
                 for _ in range(int(rng.integers(1, 60)))]
        per = int(rng.integers(1, 20))
        groups = -(-len(items) // per)
        offsets = np.concatenate(([0], np.cumsum([len(i) for i in items])))
        buf, bounds = vlen_frames(np.frombuffer(b"".join(items), np.uint8), offsets, per, groups)
        padded = items + [b""] * (groups * per - len(items))
        for g in range(groups):
            assert buf[bounds[g]:bounds[g + 1]].tobytes() == encode_vlen(padded[g * per:(g + 1) * per])


def test_sorted_unique():
    for ids in ([0, 1, 2], [3, 3, 4, 9, 9], [5, 1, 5], [], [7]):
        a = np.asarray(ids, dtype=np.int64)
        assert np.array_equal(sorted_unique(a), np.unique(a))


async def test_byte_budget_caps_and_drains():
    budget = ByteBudget(10)
    await budget.acquire(6)
    await budget.acquire(4)
    order = []

    async def late():
        await budget.acquire(5)  # waits: 10 of 10 bytes in use
        order.append("late")

    async with anyio.create_task_group() as tg:
        tg.start_soon(late)
        await anyio.sleep(0.01)
        assert order == [] and budget.used == 10
        await budget.release(6)
    assert order == ["late"] and budget.used == 9
    await budget.release(4)
    await budget.release(5)
    assert budget.used == 0
    await budget.acquire(50)  # larger than the cap: runs alone
    assert budget.used == 50
