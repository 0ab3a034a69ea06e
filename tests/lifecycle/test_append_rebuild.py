"""An append to a store with pyramid levels rebuilds them as they were built: the same factors, chunk
scales, sparsity, seed and link depth, read from what the build recorded in the level documents (or,
for a store zvf did not build, from 0.9.2's documents), so the store equals one write of the
concatenation with the same pyramid built on it."""

from __future__ import annotations

import json

import numpy as np
import pytest

import zvf.aio as za
from zvf.lifecycle.pyramid.plan import RECORD


def _sorted(a: np.ndarray) -> np.ndarray:
    return a[np.lexsort(a.T[::-1])]


async def _levels(url) -> list[np.ndarray]:
    ds = await za.open(str(url))
    out = [_sorted((await ds.read_all(level=lv)).positions) for lv in ds.levels]
    await ds.close()
    return out


def _strip_records(url) -> None:
    """The store as a tool that knows only 0.9.2's documents leaves it."""
    for lv in (1, 2):
        doc_path = url / str(lv) / "zarr.json"
        doc = json.loads(doc_path.read_text())
        doc["attributes"].pop(RECORD)
        doc_path.write_text(json.dumps(doc))


CASES = {
    # the level bin (12.5 * 2, then * 2) is larger than the level chunk from level 2 on
    "points-bins": ({"chunk_shape": (25, 25, 25), "bin_shape": (12.5,) * 3}, [(2, 1), (2, 2)], None, 0),
    # one bin per chunk at level 0; level 1 has bins of two chunks
    "points-scales": ({"chunk_shape": (25, 25, 25)}, [(2, 1), (2, 2)], [1, 2], 0),
    "points-seed": ({"chunk_shape": (25, 25, 25), "bin_shape": (12.5,) * 3}, [(2, 3), (1, 2)], [2, 1], 7),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "from-0.9.2-documents"])
async def test_append_rebuilds_with_the_factors_the_pyramid_had(tmp_path, case, recorded):
    kw, factors, scales, seed = CASES[case]
    rng = np.random.default_rng(0)
    a = rng.uniform(0, 100, (10_000, 3)).astype(np.float32)
    b = rng.uniform(0, 100, (1_000, 3)).astype(np.float32)
    one, app = tmp_path / "one", tmp_path / "app"
    await za.write_points(str(one), np.concatenate([a, b]), **kw)
    await za.build_pyramid(str(one), factors, chunk_scale_factors=scales, seed=seed)
    await za.write_points(str(app), a, **kw)
    await za.build_pyramid(str(app), factors, chunk_scale_factors=scales, seed=seed)
    if not recorded:
        if seed:
            pytest.skip("0.9.2's documents keep no seed")
        _strip_records(app)
    ds = await za.open(str(app), mode="a")
    assert (await ds.append_points(b))["pyramid_rebuilt"] == [1, 2]
    await ds.close()
    want, got = await _levels(one), await _levels(app)
    assert [len(x) for x in got] == [len(x) for x in want]
    assert len(want[2]) < len(want[1]) < len(want[0])
    for w, g in zip(want, got):
        assert np.array_equal(w, g)
    report = await za.validate(str(app), level=5)
    assert report.ok, report.errors
    assert json.loads((app / "1" / "zarr.json").read_text())["attributes"][RECORD] == \
        json.loads((one / "1" / "zarr.json").read_text())["attributes"][RECORD]


async def test_streamline_rebuild_keeps_sparsity_and_seed(tmp_path):
    """Objects kept by a seeded draw: the rebuild draws with the seed the pyramid was built with."""
    rng = np.random.default_rng(3)
    lines = [rng.uniform(0, 100, (int(k), 3)).astype(np.float32) for k in rng.integers(2, 30, 300)]
    one, app = tmp_path / "one", tmp_path / "app"
    kw = {"chunk_shape": (25, 25, 25), "bin_shape": (12.5,) * 3, "geometry_type": "streamline"}
    await za.write_polylines(str(one), lines, **kw)
    await za.build_pyramid(str(one), [(2, 2), (2, 3)], chunk_scale_factors=[1, 2], seed=5, cross_level_depth=-1)
    await za.write_polylines(str(app), lines[:200], **kw)
    await za.build_pyramid(str(app), [(2, 2), (2, 3)], chunk_scale_factors=[1, 2], seed=5, cross_level_depth=-1)
    ds = await za.open(str(app), mode="a")
    await ds.append_polylines(lines[200:])
    await ds.close()
    a, b = await za.open(str(one)), await za.open(str(app))
    for lv in (1, 2):
        assert np.array_equal(await a.object_ids(), await b.object_ids())
        wa, wb = await a.read_objects(await a.object_ids(), level=lv), await b.read_objects(
            await b.object_ids(), level=lv)
        assert len(wa) == len(wb) and all(np.array_equal(x.positions, y.positions) for x, y in zip(wa, wb))
    assert b.root.cross_level_depth == -1
    await a.close()
    await b.close()
