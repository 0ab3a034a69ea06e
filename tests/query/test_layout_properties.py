"""Property: every level of a random point pyramid answers boxes by its layout.

For random point stores (extents across zero, chunk and bin shapes, pyramids with random coarsening,
sparsity and chunk scales), at every level: ``select(bbox).count()``, ``len(select(bbox).read())``
and the numpy truth from ``read_all(level)`` filtered by the closed box agree, for random boxes,
boxes on bin edges and boxes whose faces pass through stored points; ``select(level=N).read()``
holds the rows of ``read_all(level=N)`` (as multisets); ``validate(level=5)`` passes.
"""

from __future__ import annotations

import tempfile

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zvf
from zvf.format.grid import inside


def _rows(positions: np.ndarray) -> np.ndarray:
    return positions[np.lexsort(positions.T[::-1])]


@st.composite
def stores(draw):
    n = draw(st.integers(1, 600))
    chunk = draw(st.sampled_from([10.0, 12.5, 25.0, 7.3]))
    per_chunk = draw(st.sampled_from([None, 1, 2, 4]))
    lo = draw(st.sampled_from([0.0, -30.0, -7.1]))
    span = draw(st.sampled_from([20.0, 60.0, 100.0]))
    depth = draw(st.integers(1, 2))
    factors = [(draw(st.integers(1, 3)), draw(st.sampled_from([1, 1.5, 2]))) for _ in range(depth)]
    scales = [draw(st.integers(1, 3)) for _ in range(depth)]
    seed = draw(st.integers(0, 2**16))
    return n, chunk, per_chunk, lo, span, factors, scales, seed


def _boxes(rng, pos: np.ndarray, lo: float, span: float, edge: float) -> list[tuple[np.ndarray, np.ndarray]]:
    out = []
    for _ in range(3):  # anywhere
        a, b = np.sort(rng.uniform(lo - 5, lo + span + 5, (2, 3)), axis=0)
        out.append((a, b))
    for _ in range(2):  # faces on bin edges
        a, b = np.sort(np.round(rng.uniform(lo, lo + span, (2, 3)) / edge) * edge, axis=0)
        out.append((a, b))
    if len(pos):
        for _ in range(2):  # faces through stored points (closed box: they count)
            p, q = pos[rng.integers(0, len(pos), 2)].astype(np.float64)
            out.append((np.minimum(p, q), np.maximum(p, q)))
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stores())
def test_every_level_answers_boxes_by_its_layout(case):
    n, chunk, per_chunk, lo, span, factors, scales, seed = case
    rng = np.random.default_rng(seed)
    positions = rng.uniform(lo, lo + span, (n, 3)).astype(np.float32)
    bins = None if per_chunk is None else (chunk / per_chunk,) * 3
    edge = chunk if bins is None else bins[0]
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/store"
        zvf.write_points(path, positions, chunk_shape=(chunk,) * 3, bin_shape=bins)
        zvf.build_pyramid(path, factors=factors, chunk_scale_factors=scales, seed=seed)
        with zvf.open(path) as ds:
            for level in ds.levels:
                whole = ds.read_all(level=level).positions
                everything = ds.select(level=level).read().positions
                assert len(everything) == len(whole) == ds.select(level=level).count(), level
                np.testing.assert_array_equal(_rows(everything), _rows(whole))
                for a, b in _boxes(rng, whole, lo, span, edge):
                    truth = int(inside(whole, a, b).sum())
                    q = ds.select(bbox=(a, b), level=level)
                    assert q.count() == truth, (level, a, b)
                    got = q.read().positions
                    assert len(got) == truth, (level, a, b)
                    np.testing.assert_array_equal(_rows(got), _rows(whole[inside(whole, a, b)]))
        report = zvf.validate(path, level=5)
        assert report.ok, report.summary()
