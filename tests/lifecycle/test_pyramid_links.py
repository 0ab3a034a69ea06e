"""Cross-level links deeper than one level (``cross_level_depth`` >= 2 or -1): zvf writes the ``±N`` families
0.9.2 writes, 0.9.2 reads them, and they compose the ``±1`` parents."""

from __future__ import annotations

import warnings

import anyio
import numpy as np
import pytest

import zvf
from zvf.read.cells import rows_from_payload

zv = pytest.importorskip("zarr_vectors")
from zarr_vectors.core.arrays import read_links  # noqa: E402
from zarr_vectors.core.store import get_resolution_level, open_store  # noqa: E402

CHUNK, BIN, BOUNDS = (50.0,) * 3, (25.0,) * 3, ([0.0] * 3, [200.0] * 3)


def _lines(n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [np.clip(np.cumsum(rng.normal(0, 12, (int(rng.integers(3, 30)), 3)), axis=0) + 100, 1, 199)
            .astype(np.float32) for _ in range(n)]


def _ref_links(path, level: int, delta: int) -> list:
    """0.9.2 reading ``<level>/links/<delta>``: ((chunk, row), (chunk, row)) records."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_links(get_resolution_level(open_store(str(path)), level), delta=delta)


def _position_pairs(path, level: int, delta: int) -> list:
    """The links as sorted (position at ``level``, position at ``level + delta``) pairs."""
    recs = _ref_links(path, level, delta)
    chunks = {(lv, c) for lv, side in ((level, 0), (level + delta, 1)) for c in {r[side][0] for r in recs}}

    async def rows() -> dict:
        async with await zvf.aio.open(str(path)) as ds:
            out = {}
            for lv, c in sorted(chunks):
                payload = (await (await ds.context.level(lv)).array("vertices").payloads([c]))[0]
                out[(lv, c)] = rows_from_payload(payload, np.float32, (3,), key=f"{lv}/vertices/{c}")
            return out

    got = anyio.run(rows)
    return sorted((tuple(np.round(got[(level, a[0])][a[1]], 3)), tuple(np.round(got[(level + delta, b[0])][b[1]], 3)))
                  for a, b in recs)


def test_same_deep_links_as_reference(tmp_path):
    """Streamlines, 3 new levels, a chunk scale of 2 in the middle: every ±N family as 0.9.2's, by position."""
    lines = _lines(40, seed=2)
    factors, scales = [(2, 1), (2, 1), (2, 1)], [1, 2, 1]
    for name in ("ref", "zvf"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            zv.building.write_polylines(str(tmp_path / name), lines, geometry_type="streamline", chunk_shape=CHUNK,
                                        bin_shape=BIN, bounds=BOUNDS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zv.open(str(tmp_path / "ref"), mode="r+").build_pyramid(factors=factors, chunk_scale_factors=scales,
                                                                sparsity_seed=0, cross_level_depth=-1)
    s = zvf.build_pyramid(str(tmp_path / "zvf"), factors, chunk_scale_factors=scales, cross_level_depth=-1)
    assert s["levels"][2]["deep_links"].keys() == {2, 3}
    for level, delta in [(0, 1), (0, 2), (1, 2), (0, 3), (2, -2), (3, -2), (3, -3)]:
        ours = _position_pairs(tmp_path / "zvf", level, delta)
        assert ours and ours == _position_pairs(tmp_path / "ref", level, delta), (level, delta)
    assert zvf.open(str(tmp_path / "zvf")).aio.root.cross_level_depth == -1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not zv.open(str(tmp_path / "zvf")).validate(level=3).errors
    assert zvf.validate(str(tmp_path / "zvf"), level=3).ok


def test_points_deep_links_compose_and_depth_limits(tmp_path):
    """Point clouds (zvf's thinning): ``+2`` is ``+1`` of ``+1``; depth 2 writes no ``+3``, implicit no ``-N``."""
    pos = np.random.default_rng(0).uniform(0, 200, (3000, 3)).astype(np.float32)
    p = str(tmp_path / "p")
    zvf.write_points(p, pos, chunk_shape=CHUNK, bin_shape=BIN, bounds=BOUNDS)
    zvf.build_pyramid(p, [(2, 1), (2, 1), (2, 1)], cross_level_depth=2, cross_level_storage="implicit")

    def parent(level: int, delta: int) -> dict:
        return {a: b for a, b in _ref_links(p, level, delta)}

    up01, up12, up02 = parent(0, 1), parent(1, 1), parent(0, 2)
    assert len(up02) == len(up01) == len(pos)
    assert up02 == {v: up12[m] for v, m in up01.items()}
    assert len(parent(1, 2)) == len(up12)
    assert not _ref_links(p, 0, 3) and not _ref_links(p, 2, -2)
    assert zvf.validate(p, level=3).ok
