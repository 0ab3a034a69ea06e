"""Point boxes assembled without per-row copies (read/points.py ``box_mask``, ``chunks_inside``, ``RowPicks``):
the answers must equal numpy's float64 closed-box test on every dtype, with box edges on chunk and bin seams,
on the points themselves and one ulp either side, through ``ds.query``/``select`` and ``read_chunks``."""

from __future__ import annotations

import numpy as np
import pytest

import zvf
import zvf.aio
from zvf.format.grid import inside
from zvf.read.points import box_mask, inward_edges, read_chunks

DTYPES = [np.float16, np.float32, np.float64]


def _edges(dtype: type[np.floating]) -> np.ndarray:
    """Box edges that test rounding: values of the dtype, their neighbours, and float64s between them."""
    base = np.array([-3.0, -0.1, 0.0, 0.1, 0.25, 1.0 / 3, 1.0, 2.5, 1e3, 6.5e4, 7e4], np.float64)
    with np.errstate(over="ignore"):
        v = base.astype(dtype)
    up, down = np.nextafter(v, np.asarray(np.inf, dtype)), np.nextafter(v, np.asarray(-np.inf, dtype))
    mid = (v.astype(np.float64) + up.astype(np.float64)) / 2
    return np.unique(np.concatenate([base, v, up, down, mid, [-np.inf, np.inf]]).astype(np.float64))


@pytest.mark.parametrize("dtype", DTYPES)
def test_box_mask_is_the_float64_test(dtype):
    """Edges rounded inward to the rows' dtype decide exactly as float64 compares (edges beyond the dtype's
    range, infinities and edges between two values of the dtype included)."""
    rng = np.random.default_rng(5)
    edges = _edges(dtype)
    with np.errstate(over="ignore"):
        pts = np.concatenate([edges.astype(dtype), rng.uniform(-4, 4, 200).astype(dtype),
                              np.array([np.nan, np.inf, -np.inf], dtype)])
    p = np.stack([pts, rng.permutation(pts), rng.permutation(pts)], axis=1)
    for _ in range(300):
        lo, hi = np.sort(rng.choice(edges, (2, 3)), axis=0)
        assert np.array_equal(box_mask(p, lo, hi), inside(p.astype(np.float64), lo, hi)), (lo, hi)
        axes = [0, 2]
        assert np.array_equal(box_mask(p, lo, hi, axes=axes), inside(p[:, axes].astype(np.float64), lo[axes], hi[axes]))
    low, high = inward_edges(np.dtype(dtype), np.array([0.1]), np.array([0.1]))
    assert low.dtype == high.dtype == dtype and low[0] >= 0.1 >= high[0]


def test_box_mask_other_rows():
    """Integer rows and an empty chunk go through the float64 test."""
    p = np.array([[0, 1], [2, 3], [-5, 7]], np.int32)
    lo, hi = np.array([0.0, 1.0]), np.array([2.0, 3.0])
    assert box_mask(p, lo, hi).tolist() == [True, True, False]
    assert box_mask(p, lo, hi, axes=[1]).tolist() == [True, True, False]
    assert box_mask(p, lo, np.array([1.0, 3.0]), axes=[0]).tolist() == [True, False, False]
    assert box_mask(np.zeros((0, 3), np.float32), lo[:1].repeat(3), hi[:1].repeat(3)).shape == (0,)


def _grid_points(dtype) -> np.ndarray:
    """Points on a 0.125 grid over [0, 4]^3 (seams of 1.0 chunks and 0.5 bins hold many), plus random ones."""
    rng = np.random.default_rng(11)
    g = np.arange(0, 4.0001, 0.125)
    grid = np.stack(np.meshgrid(g, g, g[::4], indexing="ij"), axis=-1).reshape(-1, 3)
    return np.concatenate([grid, rng.uniform(0, 4, (3000, 3))]).astype(dtype)


def _boxes(dtype) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(12)
    seams = np.array([0.0, 0.5, 1.0, 1.125, 2.0, 3.5, 4.0])
    near = np.concatenate([seams, np.nextafter(seams.astype(dtype), np.asarray(np.inf, dtype)),
                           np.nextafter(seams.astype(dtype), np.asarray(-np.inf, dtype)), seams + 1e-12]).astype(float)
    out = [(np.array([1.0, 1.0, 0.0]), np.array([3.0, 3.0, 4.0])),  # on chunk seams: whole chunks, closed faces
           (np.array([-1.0] * 3), np.array([5.0] * 3)),  # every chunk whole
           (np.array([0.999, 0.5, 0.0]), np.array([3.0001, 2.5, 4.0])),
           (np.array([1.0, 1.0, 1.0]), np.array([1.0, 1.0, 1.0])),  # a single point
           (np.array([10.0] * 3), np.array([11.0] * 3))]  # nothing
    for _ in range(12):
        lo, hi = np.sort(rng.choice(near, (2, 3)), axis=0)
        out.append((lo, hi))
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["chunks", "bins"])
async def test_box_answers_on_seams(tmp_path, dtype, layout):
    """Rows, attributes (a 3-channel one among them) and their order against numpy, through ``ds.query``
    (whole chunks copied untested, cut ones masked) and ``read_chunks`` with a box."""
    pos = _grid_points(dtype)
    n = len(pos)
    rgb = (np.arange(3 * n).reshape(n, 3) % 251).astype(np.uint8)
    w = np.arange(n, dtype=np.float64) * 0.5
    path = str(tmp_path / f"{layout}.zarrvectors")
    opts = {"bin_shape": (0.5, 0.5, 0.5)} if layout == "bins" else {}
    zvf.write_points(path, pos, chunk_shape=(1.0, 1.0, 1.0), attributes={"rgb": rgb, "w": w},
                     bounds=([0, 0, 0], [4, 4, 4]), dtype=np.dtype(dtype).name, **opts)
    ds = await zvf.aio.open(path)
    lvl = await ds.level(0)
    order = np.lexsort(pos.T[::-1])
    for lo, hi in _boxes(dtype):
        truth = inside(pos.astype(np.float64), lo, hi)

        def check(sel, lo=lo, hi=hi, truth=truth):
            assert sel.positions.dtype == np.dtype(dtype) and sel.positions.shape == (int(truth.sum()), 3)
            assert sel.attributes["rgb"].shape == (int(truth.sum()), 3)
            got = np.lexsort(sel.positions.T[::-1])
            assert np.array_equal(sel.positions[got], pos[order][truth[order]]), (lo, hi)
            # attributes stay with their rows: w is the input row index / 2
            rows = (sel.attributes["w"] * 2).astype(np.int64)
            assert np.array_equal(pos[rows], sel.positions) and np.array_equal(rgb[rows], sel.attributes["rgb"])
            assert np.array_equal(np.sort(rows), np.flatnonzero(truth))

        check(await ds.query((lo, hi)))
        check(await read_chunks(ds.context, lvl, lvl.chunks_in(lo, hi), ["rgb", "w"], box=(lo, hi)))
        assert await ds.select(bbox=(lo, hi)).count() == int(truth.sum())


async def test_box_with_ids_ball_where_and_empty_chunks(tmp_path):
    """Object ids stay with their rows when whole chunks skip the test; an id set, a ball and a vertex
    ``where`` still narrow them; chunks emptied by an id set or holding no row cost nothing."""
    rng = np.random.default_rng(3)
    pos = np.concatenate([rng.uniform(0, 2, (2000, 3)), rng.uniform(3, 4, (500, 3))]).astype(np.float32)
    oid = rng.integers(0, 40, len(pos))
    val = rng.normal(size=len(pos)).astype(np.float32)
    path = str(tmp_path / "ids.zarrvectors")
    zvf.write_points(path, pos, chunk_shape=(1.0, 1.0, 1.0), attributes={"val": val}, object_ids=oid,
                     bounds=([0, 0, 0], [4, 4, 4]))
    ds = await zvf.aio.open(path)
    p64 = pos.astype(np.float64)
    for lo, hi in [(np.zeros(3), np.full(3, 4.0)), (np.array([0.0, 0, 0]), np.array([1.0, 2, 2])),
                   (np.array([0.5, 0.25, 0]), np.array([3.5, 1.75, 4.0]))]:
        box = inside(p64, lo, hi)
        cases = [({}, box),
                 ({"objects": [1, 5, 7]}, box & np.isin(oid, [1, 5, 7])),
                 ({"near": ((1.0, 1.0, 1.0), 0.8)}, box & (((p64 - 1.0) ** 2).sum(axis=1) <= 0.64)),
                 ({"where": {"val": (0.0, 1.0)}}, box & (val >= 0) & (val <= 1))]
        lvl = await ds.level(0)
        direct = await read_chunks(ds.context, lvl, lvl.chunks_in(lo, hi), ["val"], box=(lo, hi))
        for extra, truth in [*cases, ("read_chunks", box)]:
            sel = direct if extra == "read_chunks" else await ds.select(bbox=(lo, hi), **extra).read()
            assert len(sel) == int(truth.sum()), extra
            key = np.lexsort(np.column_stack([sel.positions, sel.object_ids]).T)
            want = np.lexsort(np.column_stack([pos[truth], oid[truth]]).T)
            assert np.array_equal(sel.positions[key], pos[truth][want])
            assert np.array_equal(sel.object_ids[key], oid[truth][want])
            assert np.array_equal(np.sort(sel.attributes["val"]), np.sort(val[truth]))


async def test_count_of_a_box_ending_just_below_a_bins_last_value(tmp_path):
    """A float32 bin whose next edge (0.7 = 7 x 0.1 in float64) rounds down to float32 0.69999999 holds that
    value: a box ending one float32 below it does not cover the bin, so count() reads the rows (it said 3)."""
    top = np.float32(0.7)
    assert float(top) < 7 * 0.1
    pos = np.array([[top, 0.05, 0.05], [0.65, 0.05, 0.05], [0.61, 0.05, 0.05]], np.float32)
    path = str(tmp_path / "edge.zarrvectors")
    zvf.write_points(path, pos, chunk_shape=(0.4,) * 3, bin_shape=(0.1,) * 3, bounds=([0] * 3, [0.8] * 3))
    ds = await zvf.aio.open(path)
    box = ((0.6, 0.0, 0.0), (float(np.nextafter(top, np.float32(-1))), 0.1, 0.1))
    assert await ds.select(bbox=box).count() == len(await ds.query(box)) == 2
    assert await ds.select(bbox=((0.6, 0.0, 0.0), (float(top), 0.1, 0.1))).count() == 3
