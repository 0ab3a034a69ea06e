"""chunk_shape="auto": the chooser on 1 k, 1 M and 100 M-point extents, writers using it, the sparse-layout warning
(and refusal); for points, chunks sized by where the points are (clusters, a surface, an even spread); for objects,
chunks sized by what an object read fetches and bins by the objects' size."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import zvf.aio as za
from tests.support.clouds import point_clusters, point_spread, point_surface
from tests.support.walks import streamline_walks
from zvf.config import tuned, tuning
from zvf.errors import InvalidArgumentError, LayoutWarning
from zvf.write.layout import (
    ObjectSample,
    ObjectSampler,
    PointSample,
    PointSampler,
    check_cells,
    choose_bin_shape,
    choose_chunk_shape,
    object_bin_shape,
    point_bin_shape,
    resolve,
)


def _chunks(lo, hi, cs):
    return int(np.prod(np.floor(np.asarray(hi) / cs) - np.floor(np.asarray(lo) / cs) + 1))


@pytest.mark.parametrize("n, lo, hi", [
    (1_000, [0, 0, 0], [100, 100, 100]),
    (1_000_000, [0, 0, 0], [1000, 1000, 1000]),
    (100_000_000, [-5e4, -5e4, 0], [5e4, 5e4, 2e4]),
    (1_000_000, [0, 0, 0], [100, 100, 0]),  # a flat sheet: one chunk along z
])
def test_chooser_aims_at_the_target(n, lo, hi):
    cs = choose_chunk_shape(lo, hi, n)
    assert len(cs) == 3 and len(set(cs)) == 1
    made = _chunks(lo, hi, cs[0])
    per = n / made
    assert per >= tuning().layout_target_points / 8 or made == 1, (cs, made)
    assert per <= tuning().layout_target_points * 8, (cs, made)
    if n <= tuning().layout_target_points:
        assert made == 1


def test_chooser_edge_cases():
    assert choose_chunk_shape([5, 5], [5, 5], 10) == [choose_chunk_shape([5, 5], [5, 5], 10)[0]] * 2
    assert choose_bin_shape([8.0, 8.0, 8.0], 100) is None
    bins = choose_bin_shape([8.0, 8.0, 8.0], 65536)
    assert bins is not None and all(8.0 / b == int(8.0 / b) for b in bins)
    with pytest.raises(InvalidArgumentError, match="chunk_shape"):
        resolve("big", None, [0], [1], 5)
    with pytest.raises(InvalidArgumentError, match="bin_shape"):
        resolve([1.0], "fine", [0], [1], 5)
    assert resolve([2, 2], None, [0, 0], [1, 1], 5) == ([2, 2], None)  # explicit shapes untouched


async def test_writers_take_auto(tmp_path):
    rng = np.random.default_rng(0)
    pos = rng.uniform(0, 50, (5000, 3)).astype(np.float32)
    await za.write_points(str(tmp_path / "p"), pos, chunk_shape="auto", bin_shape="auto")
    ds = await za.open(str(tmp_path / "p"))
    assert ds.chunk_shape == tuple(choose_chunk_shape(pos.min(0), pos.max(0), 5000, points=PointSample.of(pos)))
    assert len(await ds.read_all()) == 5000
    lines = [rng.uniform(0, 50, (20, 3)) for _ in range(10)]
    await za.write_polylines(str(tmp_path / "l"), lines, chunk_shape="auto")
    assert len((await (await za.open(str(tmp_path / "l"))).read_object(3)).positions) == 20


def test_sparse_layout_warns():
    with pytest.warns(LayoutWarning, match="chunk_shape='auto' would choose"):
        check_cells(20_000, 20_000, [1e-3] * 3, [0, 0, 0], [1, 1, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_cells(20_000, 10, [0.5] * 3, [0, 0, 0], [1, 1, 1])
        check_cells(2_000, 2_000, [1e-3] * 3, [0, 0, 0], [1, 1, 1])  # few cells: no noise


async def test_writer_warns_on_absurd_chunk_shape(memory_url):
    pos = np.random.default_rng(1).random((5000, 3)).astype(np.float32)
    with pytest.warns(LayoutWarning, match="5,000 vertices in 5,000 chunks"):
        await za.write_points(memory_url, pos, chunk_shape=[1e-3] * 3)


# ------------------------------------------------------------------------------------------- where points are


def _census(pos: np.ndarray, edge: float) -> tuple[float, int]:
    """Exactly: (vertices in the chunk the median vertex lies in, occupied chunks)."""
    cells = np.floor(pos / edge).astype(np.int64)
    cells -= cells.min(axis=0)
    _, count = np.unique((cells[:, 0] << 42) + (cells[:, 1] << 21) + cells[:, 2], return_counts=True)
    return float(np.median(np.repeat(count, count))), len(count)


def _misfit(pos: np.ndarray, edge: float) -> float:
    return abs(np.log(_census(pos, edge)[0] / tuning().layout_target_points))


def test_clustered_points_get_chunks_their_density_asks_for():
    """Issue 26: clusters in a 1 km cube got chunks from the extent, as if spread evenly: 500 m, the chunk a
    typical vertex lies in holding ~245 k; from a sample of where the points are, 200 m chunks of ~70 k."""
    pos = point_clusters(1_000_000)
    lo, hi, n = pos.min(0), pos.max(0), len(pos)
    by_extent = choose_chunk_shape(lo, hi, n)[0]
    sample = PointSample.of(pos)
    by_points = choose_chunk_shape(lo, hi, n, points=sample)[0]
    assert by_points < by_extent
    assert _misfit(pos, by_points) < np.log(2) < _misfit(pos, by_extent)  # within 2x of the target, from 3.7x
    assert n / _census(pos, by_points)[1] >= tuning().layout_min_chunk_points
    assert choose_chunk_shape(lo, hi, n, points=PointSample.of(pos)) == [by_points] * 3  # the same every time
    chunk, bins = resolve("auto", "auto", lo, hi, n, points=sample)  # bins from where the points are
    assert chunk == [by_points] * 3 and bins == point_bin_shape(chunk, sample)
    assert bins is not None and bins[0] < resolve("auto", "auto", lo, hi, n)[1][0]


def test_clusters_too_dense_for_any_grid_keep_their_chunks_and_get_finer_bins():
    """Clusters under a metre wide (issue 26's benchmark has some a few metres wide) fill the chunk a typical
    vertex lies in at every edge a grid can afford: 200 m chunks instead of 500 m would make 15 times as
    many for 1.6 times fewer vertices in that chunk, so the edge stays; the bins follow that chunk's count."""
    pos = point_clusters(1_000_000, sigma=(0.2, 1.0), k=10)
    lo, hi, n = pos.min(0), pos.max(0), len(pos)
    by_extent = choose_chunk_shape(lo, hi, n)
    sample = PointSample.of(pos)
    assert choose_chunk_shape(lo, hi, n, points=sample) == by_extent
    assert _census(pos, by_extent[0])[0] / _census(pos, by_extent[0] * 0.4)[0] < tuning().layout_density_gain
    assert resolve("auto", "auto", lo, hi, n, points=sample)[1] == point_bin_shape(by_extent, sample)


def test_a_sparse_background_keeps_chunks_from_going_near_empty():
    """20 % of the points spread over the whole cube: the 100 m chunks the clusters ask for (a typical vertex's
    chunk near the target) would be 1 000 chunks of ~1 000 vertices on average, under
    layout_min_chunk_points: the chooser does not go there (and does with a lower floor)."""
    pos = point_clusters(1_000_000, sigma=(20.0, 60.0), k=5, background=0.2)
    lo, hi, n = pos.min(0), pos.max(0), len(pos)
    wanted = 100.0
    assert _misfit(pos, wanted) < np.log(2)
    assert n / _census(pos, wanted)[1] < tuning().layout_min_chunk_points
    edge = choose_chunk_shape(lo, hi, n, points=PointSample.of(pos))[0]
    assert edge > wanted and n / _census(pos, edge)[1] >= tuning().layout_min_chunk_points
    with tuned(layout_min_chunk_points=512):
        assert choose_chunk_shape(lo, hi, n, points=PointSample.of(pos))[0] == wanted


@pytest.mark.parametrize("make", [point_surface, point_spread], ids=["surface", "even"])
@pytest.mark.parametrize("n", [200_000, 1_000_000])
def test_surfaces_and_even_spreads_get_no_worse(make, n):
    pos = make(n)
    lo, hi = pos.min(0), pos.max(0)
    by_extent = choose_chunk_shape(lo, hi, n)[0]
    by_points = choose_chunk_shape(lo, hi, n, points=PointSample.of(pos))[0]
    assert _misfit(pos, by_points) <= _misfit(pos, by_extent)
    assert n / _census(pos, by_points)[1] >= tuning().layout_min_chunk_points


@pytest.mark.parametrize("make", [point_surface, point_clusters, point_spread], ids=["surface", "clusters", "even"])
def test_bins_follow_where_the_points_are(make):
    """bin_shape="auto" with a sample: the bin the median vertex lies in holds about layout_target_bin_points
    -- closer than bins sized from the chunk's count as if its volume were full (a surface fills a few bins
    of each column: those bins held twice the target; clusters fill a few bins of the chunk) -- and a chunk
    never gets more than layout_max_point_bins bins."""
    pos = make(1_000_000)
    lo, hi, n = pos.min(0), pos.max(0), len(pos)
    sample = PointSample.of(pos)
    chunk = choose_chunk_shape(lo, hi, n, points=sample)
    bins = point_bin_shape(chunk, sample)
    by_count = choose_bin_shape(chunk, _census(pos, chunk[0])[0])
    assert bins is not None and by_count is not None
    k = chunk[0] / bins[0]
    assert k == int(k) and int(k) & (int(k) - 1) == 0 and bins == [bins[0]] * 3  # a power of two, every axis
    assert k ** 3 <= tuning().layout_max_point_bins

    def misfit(edge):
        return abs(np.log(_census(pos, edge)[0] / tuning().layout_target_bin_points))

    assert misfit(bins[0]) <= misfit(by_count[0]) + 1e-9
    if k * 2 <= tuning().layout_max_point_bins ** (1 / 3):  # the next finer bins were in reach: no closer
        assert misfit(bins[0]) <= misfit(bins[0] / 2) + 0.1
    assert misfit(bins[0]) <= misfit(bins[0] * 2) + 0.1
    with tuned(layout_max_point_bins=8):
        assert point_bin_shape(chunk, sample) in (None, [c / 2 for c in chunk])


def test_point_sample_estimates_the_whole():
    pos = point_clusters(400_000)
    every = PointSample.of(pos, limit=len(pos))
    some = PointSample.of(pos, limit=20_000)
    assert len(some) == 20_000 and some.n == len(pos)
    assert np.array_equal(some.positions, PointSample.of(pos, limit=20_000).positions)  # seeded
    for edge in (20.0, 100.0, 500.0):
        typical, occupied = _census(pos, edge)
        assert every.census(edge) == (typical, occupied)  # the whole is its own sample: exact
        guess_typical, guess_occupied = some.census(edge)
        assert guess_typical == pytest.approx(typical, rel=0.1)
        if occupied < len(pos) / 100:  # chunks of hundreds of vertices: the sample saw nearly all
            assert guess_occupied == pytest.approx(occupied, rel=0.1)
        else:  # ~20 k chunks of a vertex or two, 1 in 20 sampled: most unseen, yet clearly too many
            assert guess_occupied > 10 * len(pos) / tuning().layout_min_chunk_points


def test_point_sampler_samples_a_stream_evenly():
    pos = point_clusters(300_000)
    sampler = PointSampler(limit=10_000)
    for i in range(0, len(pos), 7_000):
        sampler.add(pos[i:i + 7_000])
        assert sum(map(len, sampler.kept)) <= 20_000  # memory: the sample
    sample = sampler.sample()
    assert sample is not None and len(sample) == 10_000 and sample.n == len(pos)
    assert sample.census(100.0)[0] == pytest.approx(_census(pos, 100.0)[0], rel=0.15)
    assert PointSampler().sample() is None


async def test_write_points_chunks_by_where_the_points_are(tmp_path):
    """The writer samples its input: clustered points get the finer chunks and bins the extent alone missed."""
    pos = point_clusters(16_000).astype(np.float32)  # the ratios of 1 M points to the default settings
    lo, hi = pos.min(0), pos.max(0)
    with tuned(layout_target_points=1024, layout_min_chunk_points=64):
        by_extent = choose_chunk_shape(lo, hi, len(pos))
        await za.write_points(str(tmp_path / "p"), pos, chunk_shape="auto", bin_shape="auto")
        expected = resolve("auto", "auto", lo, hi, len(pos), points=PointSample.of(pos))
    ds = await za.open(str(tmp_path / "p"))
    assert list(ds.chunk_shape) == expected[0] and ds.chunk_shape[0] < by_extent[0]
    assert (await ds.info())["bin_shape"] == expected[1]
    assert len(await ds.read_all()) == len(pos)


# ------------------------------------------------------------------------------------------- object reads


def _exact_overhead(lines, edge: float) -> float:
    """Mean rows of other objects in the chunks each object passes through (every object counted)."""
    pos = np.concatenate(lines)
    _, cell, count = np.unique(np.floor(pos / edge), axis=0, return_inverse=True, return_counts=True)
    owner = np.repeat(np.arange(len(lines)), [len(x) for x in lines])
    pairs, own = np.unique(owner * len(count) + cell.reshape(-1), return_counts=True)
    return float((count[pairs % len(count)] - own).sum()) / len(lines)


def test_object_sample_measures_what_an_object_read_fetches():
    lines = streamline_walks(300, 80)
    every = ObjectSample.of(np.concatenate(lines), [len(x) for x in lines])
    assert len(every) == 300
    for edge in (5.0, 20.0, 50.0):
        assert every.read_overhead(edge, sum(map(len, lines))) == pytest.approx(_exact_overhead(lines, edge))
    some = ObjectSample.of(np.concatenate(lines), [len(x) for x in lines], limit=100)
    assert len(some) == 100 and np.array_equal(some.positions[:80], lines[0])  # evenly spaced, the first kept


def test_chooser_shrinks_chunks_for_object_reads():
    """Vertex count alone put ~100 k vertices a chunk; an object read fetched every chunk it crosses, whole."""
    lines = streamline_walks(8000, 100, seed=1)
    pos = np.concatenate(lines)
    sample = ObjectSample.of(pos, [len(x) for x in lines])
    by_count = choose_chunk_shape(pos.min(0), pos.max(0), len(pos))[0]
    for_objects = choose_chunk_shape(pos.min(0), pos.max(0), len(pos), objects=sample)[0]
    assert for_objects < by_count
    assert sample.read_overhead(for_objects, len(pos)) * 12 < sample.read_overhead(by_count, len(pos)) * 12 / 4
    made = _chunks(pos.min(0), pos.max(0), for_objects)
    assert len(pos) / made >= tuning().layout_min_chunk_points  # never chunks too small for a whole-level read


def test_chooser_leaves_objects_alone_when_reads_are_cheap():
    one = ObjectSample.of(np.random.default_rng(0).random((200_000, 3)) * 100, [200_000])  # one big mesh
    assert choose_chunk_shape([0] * 3, [100] * 3, 200_000, objects=one) == choose_chunk_shape([0] * 3, [100] * 3,
                                                                                             200_000)
    small = ObjectSample.of(np.random.default_rng(0).random((5000, 3)), [50] * 100)  # one chunk: 60 kB
    assert choose_chunk_shape([0] * 3, [1] * 3, 5000, objects=small) == choose_chunk_shape([0] * 3, [1] * 3, 5000)
    point = ObjectSample.of(np.zeros((100_000, 3)), [10] * 10_000)  # every object at one point: no way to split
    assert choose_chunk_shape([0] * 3, [0] * 3, 100_000, objects=point) == choose_chunk_shape([0] * 3, [0] * 3,
                                                                                              100_000)
    assert object_bin_shape([1.0] * 3, point) is None


def test_object_bins_follow_the_objects_size():
    lines = streamline_walks(200, 100)
    sample = ObjectSample.of(np.concatenate(lines), [len(x) for x in lines])
    size = sample.typical_size()
    bins = object_bin_shape([50.0] * 3, sample)
    assert bins is not None and len(set(bins)) == 1
    k = 50.0 / bins[0]
    assert k == 2 ** round(np.log2(k)) and k ** 3 <= tuning().layout_max_object_bins  # nested, bounded
    assert size / tuning().layout_object_bins / 2 <= bins[0] <= size / tuning().layout_object_bins * 2
    assert object_bin_shape([1000.0] * 3, sample) == [1000.0 / 64] * 3  # capped bins per chunk
    chunk, auto = resolve("auto", "auto", [0] * 3, [150] * 3, 20_000, objects=sample)
    assert auto == object_bin_shape(chunk, sample)


def test_object_sampler_keeps_an_even_bounded_sample():
    sampler = ObjectSampler(limit=10)
    objects = [np.full((2, 3), float(i)) for i in range(1000)]
    for lo in range(0, 1000, 37):
        sampler.add(objects[lo:lo + 37])
    sample = sampler.sample()
    kept = sample.positions[sample.offsets[:-1], 0].astype(int)
    assert 10 <= len(kept) <= 20 and np.all(np.diff(kept) == kept[1] - kept[0]) and kept[0] == 0
    assert ObjectSampler().sample() is None


def test_too_many_sparse_cells_are_refused():
    with pytest.raises(InvalidArgumentError, match=r"puts 2,000,000 vertices in 2,000,000 chunks .*refused"):
        check_cells(2_000_000, 2_000_000, [1e-3] * 3, [0, 0, 0], [1, 1, 1])
    with pytest.warns(LayoutWarning):
        check_cells(1_000_000, 1_000_000, [1e-3] * 3, [0, 0, 0], [1, 1, 1])  # under the limit: said only


async def test_object_writers_take_auto_for_object_reads(tmp_path):
    lines = streamline_walks(3000, 100, seed=2)
    await za.write_polylines(str(tmp_path / "l"), lines, chunk_shape="auto", bin_shape="auto")
    ds = await za.open(str(tmp_path / "l"))
    pos = np.concatenate(lines)
    sample = ObjectSample.of(pos, [len(x) for x in lines])
    assert list(ds.chunk_shape) == choose_chunk_shape(pos.min(0), pos.max(0), len(pos), objects=sample)
    assert (await ds.info())["bin_shape"] == object_bin_shape(ds.chunk_shape, sample)
