"""Box queries over compressed cells with bins: every point of the closed box -- boxes whose faces pass through
points, boxes cutting bins, boxes holding whole chunks -- and cells read whole are tested row by row, with no
fragment index read beside them (decoding it and gathering the touched bins' rows cost more than the test)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zvf

GRID = 0.5  # coordinates on a grid, so box faces land on points


@pytest.fixture(scope="module", params=[None, "auto"], ids=["plain", "sharded"])
def store(request, tmp_path_factory):
    rng = np.random.default_rng(11)
    clustered = rng.normal(40.0, 6.0, (6_000, 3))
    spread = rng.uniform(0.0, 100.0, (4_000, 3))
    pos = (np.round(np.clip(np.concatenate([clustered, spread]), 0, 100) / GRID) * GRID).astype(np.float32)
    value = np.arange(len(pos), dtype=np.int64)
    path = tmp_path_factory.mktemp("binned") / "s.zarrvectors"
    zvf.write_points(str(path), pos, attributes={"row": value}, chunk_shape=[50.0] * 3, bin_shape=[12.5] * 3,
                     compression="zstd", shard_shape=request.param)
    return str(path), pos, value


def _truth(pos, lo, hi):
    return np.flatnonzero(np.all((pos >= lo) & (pos <= hi), axis=1))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(corner=st.tuples(*[st.integers(0, 200)] * 3), size=st.tuples(*[st.integers(0, 120)] * 3))
def test_every_point_of_the_box(store, corner, size):
    url, pos, _ = store
    lo = np.asarray(corner, np.float64) * GRID
    hi = lo + np.asarray(size, np.float64) * GRID
    with zvf.open(url) as ds:
        got = ds.query((lo.tolist(), hi.tolist()))
    want = _truth(pos, lo, hi)
    assert sorted(got.attributes["row"].tolist()) == want.tolist()
    np.testing.assert_array_equal(got.positions, pos[got.attributes["row"]])


def test_a_box_over_whole_cells_reads_no_fragment_index(store):
    url, pos, _ = store
    lo, hi = [38.0, 38.0, 38.0], [41.5, 41.5, 41.5]
    with zvf.open(url) as ds:
        plan = ds.select(bbox=(lo, hi)).explain()
        got = ds.query((lo, hi))
    assert len(got) == len(_truth(pos, np.asarray(lo), np.asarray(hi)))
    assert "vertex_fragments" not in plan, plan


@pytest.mark.asyncio
async def test_repeated_queries_decode_each_cell_once(store):
    import zvf.aio as za
    from zvf.config import tuned

    url, pos, _ = store
    boxes = [([30.0 + i % 5, 30.0, 30.0], [45.0 + i % 5, 45.0, 45.0]) for i in range(10)]

    async def requests(budget: int) -> tuple[int, int]:
        """Requests of the first query, and of all ten."""
        first = 0
        with tuned(cell_cache_bytes=budget):
            async with await za.open(url) as ds:
                start = ds.stats.requests
                for b in boxes:
                    sel = await ds.query(b)
                    want = _truth(pos, np.asarray(b[0]), np.asarray(b[1]))
                    assert sorted(sel.attributes["row"].tolist()) == want.tolist()
                    first = first or ds.stats.requests - start
                return first, ds.stats.requests - start

    first, every = await requests(64 << 20)
    assert every == first > 0  # the same cells each time: queries 2..10 find every one decoded
    first, every = await requests(1)  # no room: each query reads its cells again
    assert every >= first + 9 > 9
