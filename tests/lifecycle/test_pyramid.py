"""Pyramids: zvf builds them as zarr-vectors 0.9.2 does (and reads its ones), carries attributes,
thins point clouds reproducibly, and never leaves a store unreadable when killed mid-build."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import zvf
from zvf.errors import InvalidArgumentError
from zvf.lifecycle.pyramid.coarsen import weighted_mean_or_mode

zv = pytest.importorskip("zarr_vectors")

CHUNK, BIN, BOUNDS = (50.0,) * 3, (25.0,) * 3, ([0.0] * 3, [100.0] * 3)


def _lines(n=30, seed=1):
    rng = np.random.default_rng(seed)
    lines = [np.clip(np.cumsum(rng.normal(0, 6, (rng.integers(3, 25), 3)), axis=0) + 50, 1, 99).astype(np.float32)
             for _ in range(n)]
    return lines, rng


def _write_ref_lines(path, lines, rng, **extra):
    from zarr_vectors import building

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        building.write_polylines(str(path), lines, geometry_type="streamline", chunk_shape=CHUNK, bin_shape=BIN,
                                 bounds=BOUNDS, **extra)


def _ref_open(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return zv.open(str(path), mode="r+")


def _ref_objects(ref, level, n):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lv = ref.level(level)
        return [np.asarray(lv.objects[i].positions).reshape(-1, 3) for i in range(n)]


def _rows(a):
    a = np.asarray(a, np.float64).reshape(len(a), -1)
    return a[np.lexsort(a.T[::-1])] if len(a) else a


@pytest.fixture
def twin_stores(tmp_path):
    """The same streamlines written twice by 0.9.2: one pyramid built by 0.9.2, one by zvf."""
    lines, rng = _lines(16)
    fa = [rng.random(len(x)).astype(np.float32) for x in lines]
    for name in ("ref", "zvf"):
        _write_ref_lines(tmp_path / name, lines, rng, vertex_attributes={"fa": fa},
                         object_attributes={"length": np.arange(len(lines), dtype=np.float32)})
    return tmp_path / "ref", tmp_path / "zvf", lines


@pytest.mark.parametrize("factors,scales", [([(2, 1)], None), ([(2, 1), (2, 2)], [1, 2])])
def test_same_coarse_objects_as_reference(twin_stores, factors, scales):
    ref_path, zvf_path, lines = twin_stores
    _ref_open(ref_path).build_pyramid(factors=factors, chunk_scale_factors=scales, sparsity_seed=0)
    summary = zvf.build_pyramid(str(zvf_path), factors, chunk_scale_factors=scales)
    assert [lv["level"] for lv in summary["levels"]] == list(range(1, len(factors) + 1))
    a, b = zvf.open(str(ref_path)), zvf.open(str(zvf_path))
    assert a.levels == b.levels == list(range(len(factors) + 1))
    ref_b = _ref_open(zvf_path)
    assert not ref_b.validate(level=3).errors
    assert zvf.validate(str(zvf_path), level=3).ok
    for lv in b.levels[1:]:
        assert a.object_ids(level=lv).tolist() == b.object_ids(level=lv).tolist()
        ref_objs = _ref_objects(ref_b, lv, len(lines))
        for i in range(len(lines)):
            mine = b.read_object(i, level=lv).positions
            assert np.array_equal(a.read_object(i, level=lv).positions, mine), (lv, i)  # same as 0.9.2 builds
            assert np.array_equal(ref_objs[i], mine), (lv, i)  # 0.9.2 reads what zvf reads
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = np.asarray(ref_b.level(lv).select().read().positions).reshape(-1, 3)
        # 0.9.2 reads a sequential level as its objects' paths: zvf's box query over the whole extent
        assert np.array_equal(_rows(got), _rows(b.query(BOUNDS, level=lv).positions))
        la = a.object_attribute("length", level=lv)
        assert np.array_equal(la, b.object_attribute("length", level=lv), equal_nan=True)
    # the kept objects and metadata match the reference's
    ra, rb = a.aio.root, b.aio.root
    assert ra.format_capabilities == rb.format_capabilities
    assert ra.transforms == rb.transforms
    for lv in b.levels[1:]:
        ma, mb = a.aio.context.levels[lv].meta, b.aio.context.levels[lv].meta
        for key in ("object_sparsity", "coarsening_method", "parent_level", "preserves_object_ids",
                    "inherited_num_objects", "shared_fragments", "chunk_shape", "vertex_count"):
            assert getattr(ma, key) == getattr(mb, key), key


def test_reads_reference_pyramid_like_reference(tmp_path):
    lines, rng = _lines(20, seed=5)
    _write_ref_lines(tmp_path / "r", lines, rng)
    _ref_open(tmp_path / "r").build_pyramid(factors=[(2, 1), (2, 2)], chunk_scale_factors=[1, 2],
                                            cross_level_depth=2, sparsity_seed=3)
    ds, ref = zvf.open(str(tmp_path / "r")), _ref_open(tmp_path / "r")
    assert ds.levels == [0, 1, 2]
    for lv in ds.levels:
        theirs = _ref_objects(ref, lv, len(lines))
        for i in range(len(lines)):
            assert np.array_equal(ds.read_object(i, level=lv).positions, theirs[i]), (lv, i)
    assert zvf.validate(str(tmp_path / "r"), level=3).ok


def test_vertex_attributes_and_groups_carried(tmp_path):
    """Metavertex attributes are the mean (floats) / mode (integers) over the bin's vertices of kept objects."""
    lines, rng = _lines(12, seed=9)
    fa = [rng.random(len(x)).astype(np.float32) for x in lines]
    lab = [rng.integers(0, 3, len(x)).astype(np.int32) for x in lines]
    path = str(tmp_path / "s")
    zvf.write_polylines(path, lines, geometry_type="streamline", chunk_shape=CHUNK, bin_shape=BIN, bounds=BOUNDS,
                        attributes={"fa": fa, "lab": lab}, groups={0: [0, 1, 2], 1: [5, 7]},
                        group_attributes={"w": np.array([1.5, 2.5], np.float32)})
    zvf.build_pyramid(path, [(2, 1)])
    ds = zvf.open(path)
    sel = ds.read_all(level=1)  # each object's metavertices: a shared one once per object through it
    assert len(sel) == ds.select(level=1).count()
    _, first = np.unique(sel.positions, axis=0, return_index=True)  # each metavertex once
    sel = zvf.Selection(sel.positions[first], {n: v[first] for n, v in sel.attributes.items()}, None)
    pos = np.concatenate(lines).astype(np.float64)
    bins = np.floor(pos / 50.0).astype(np.int64)
    _, inv = np.unique(bins, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    w = np.ones(len(pos))
    want_fa = weighted_mean_or_mode(np.concatenate(fa), inv, w, inv.max() + 1)
    want_lab = weighted_mean_or_mode(np.concatenate(lab), inv, w, inv.max() + 1)
    cent = weighted_mean_or_mode(pos, inv, w, inv.max() + 1).astype(np.float32)
    # match rows by position
    got_order = np.lexsort(sel.positions.T[::-1])
    want_order = np.lexsort(cent.T[::-1])
    assert np.array_equal(sel.positions[got_order], cent[want_order])
    assert np.allclose(sel.attributes["fa"][got_order], want_fa[want_order], rtol=1e-6)
    assert np.array_equal(sel.attributes["lab"][got_order], want_lab[want_order])
    # a hand-made mode: weights decide, ties go to the smaller value
    assert weighted_mean_or_mode(np.array([5, 5, 2, 2, 9]), np.zeros(5, np.int64), np.array([1, 1, 1, 1, 3.0]), 1
                                 ).tolist() == [9]
    assert weighted_mean_or_mode(np.array([5, 2]), np.zeros(2, np.int64), np.ones(2), 1).tolist() == [2]
    assert [g.tolist() for g in ds.groups(level=1)] == [[0, 1, 2], [5, 7]]
    assert ds.group_attribute("w", level=1).tolist() == [1.5, 2.5]


def test_points_subsample_reproducible(tmp_path):
    rng = np.random.default_rng(0)
    pos = rng.uniform(0, 100, (4000, 3)).astype(np.float32)
    inten = rng.random(4000).astype(np.float32)
    paths = []
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        p = str(tmp_path / name)
        zvf.write_points(p, pos, chunk_shape=CHUNK, bin_shape=BIN, bounds=BOUNDS, attributes={"i": inten})
        zvf.build_pyramid(p, [(2, 1), (2, 2)], chunk_scale_factors=[1, 2], seed=seed)
        paths.append(p)
    a, b, c = (zvf.open(p) for p in paths)
    s1 = a.read_all(level=1)
    # every coarse point is a source point with its own attribute; each 50-unit bin keeps ceil(n / 8)
    src = {tuple(r): v for r, v in zip(pos.tolist(), inten.tolist())}
    assert all(src[tuple(r)] == v for r, v in zip(s1.positions.tolist(), s1.attributes["i"].tolist()))
    counts = np.unique(np.floor(pos / 50).astype(int), axis=0, return_counts=True)[1]
    assert len(s1) == int(np.ceil(counts / 8).sum())
    assert len(a.read_all(level=2)) == int(np.ceil(np.unique(np.floor(s1.positions / 100).astype(int), axis=0,
                                                             return_counts=True)[1] / 16).sum())
    assert np.array_equal(s1.positions, b.read_all(level=1).positions)  # same seed, same sample
    assert not np.array_equal(_rows(s1.positions), _rows(c.read_all(level=1).positions))
    ref = _ref_open(paths[0])
    assert not ref.validate(level=3).errors
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for lv in (1, 2):
            got = np.asarray(ref.level(lv).select().read().positions).reshape(-1, 3)
            assert np.array_equal(_rows(got), _rows(a.read_all(level=lv).positions))
        box = ([10.0, 20.0, 30.0], [60.0, 80.0, 90.0])
        got = np.asarray(ref.level(1).select(bbox=box).read().positions).reshape(-1, 3)
    assert np.array_equal(_rows(got), _rows(a.query(box, level=1).positions))
    assert zvf.validate(paths[0], level=3).ok


def test_graph_pyramid_matches_reference(tmp_path):
    from zarr_vectors import building

    rng = np.random.default_rng(4)
    pos = rng.uniform(1, 99, (200, 3)).astype(np.float32)
    edges = np.stack([np.arange(199), np.arange(1, 200)], axis=1)
    oids = np.repeat(np.arange(10), 20)
    for name in ("r", "z"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            building.write_graph(str(tmp_path / name), pos, edges[oids[edges[:, 0]] == oids[edges[:, 1]]],
                                 object_ids=oids, chunk_shape=CHUNK, bin_shape=BIN, bounds=BOUNDS)
    _ref_open(tmp_path / "r").build_pyramid(factors=[(2, 2)], sparsity_seed=0)
    zvf.build_pyramid(str(tmp_path / "z"), [(2, 2)], cross_level_storage="implicit")
    a, b = zvf.open(str(tmp_path / "r")), zvf.open(str(tmp_path / "z"))
    for i in range(10):
        assert np.array_equal(a.read_object(i, level=1).positions, b.read_object(i, level=1).positions), i
    assert not _ref_open(tmp_path / "z").validate(level=3).errors


@pytest.mark.parametrize("kwargs,match", [
    ({"factors": []}, "factors"),
    ({"factors": [(1.5, 1)]}, "coarsen"),
    ({"factors": [(2, 0.5)]}, "sparsity"),
    ({"factors": [(2, 1)], "chunk_scale_factors": [1, 2]}, "chunk_scale_factors"),
    ({"factors": [(2, 1)], "cross_level_storage": "both"}, "cross_level_storage"),
    ({"factors": [(2, 1)], "cross_level_depth": -2}, "cross_level_depth"),
    ({"factors": [(2, 1)], "sparsity_strategy": "length"}, "sparsity_strategy"),
])
def test_bad_arguments(tmp_path, kwargs, match):
    p = str(tmp_path / "p")
    zvf.write_points(p, np.random.default_rng(0).uniform(0, 100, (50, 3)), chunk_shape=CHUNK, bounds=BOUNDS)
    factors = kwargs.pop("factors")
    with pytest.raises(InvalidArgumentError, match=match):
        zvf.build_pyramid(p, factors, **kwargs)
    assert zvf.open(p).levels == [0]
    zvf.build_pyramid(p, [(2, 1)])  # the failed calls left no claim behind
    with pytest.raises(InvalidArgumentError, match="already has levels"):
        zvf.build_pyramid(p, [(2, 1)])


def test_cli(tmp_path):
    from zvf.cli.main import main

    p = str(tmp_path / "p")
    zvf.write_points(p, np.random.default_rng(0).uniform(0, 100, (500, 3)), chunk_shape=CHUNK, bin_shape=BIN,
                     bounds=BOUNDS)
    assert main(["pyramid", p, "--factor", "2:1", "--factor", "2", "--chunk-scale", "1", "--chunk-scale", "2",
                 "--links", "implicit"]) == 0
    ds = zvf.open(p)
    assert ds.levels == [0, 1, 2] and ds.aio.root.cross_level_storage == "implicit"


CHILD = textwrap.dedent("""
    import sys, time, zvf
    from zvf.lifecycle.pyramid.writer import PyramidWriter
    path, where = sys.argv[1], sys.argv[2]

    def pause(*_):
        print("PAUSED", flush=True)
        time.sleep(60)

    if where == "publish":  # every level written, root not yet replaced
        flush = PyramidWriter.flush
        async def publish(self):
            await flush(self)
            pause()
        PyramidWriter._publish = publish
        zvf.build_pyramid(path, [(2, 1), (2, 1)])
    else:  # in the middle of level 1's blocks
        zvf.build_pyramid(path, [(2, 1), (2, 1)], progress=pause)
""")


@pytest.mark.parametrize("where", ["blocks", "publish"])
def test_sigkill_leaves_store_as_before(tmp_path, where):
    lines, _rng = _lines(40, seed=2)
    path = str(tmp_path / "s")
    zvf.write_polylines(path, lines, geometry_type="streamline", chunk_shape=CHUNK, bin_shape=BIN, bounds=BOUNDS)
    before = zvf.open(path)
    want = [before.read_object(i).positions for i in range(len(lines))]
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    proc = subprocess.Popen([sys.executable, str(child), path, where], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("PAUSED"), line
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    ds = zvf.open(path)
    assert ds.levels == [0]
    assert all(np.array_equal(ds.read_object(i).positions, w) for i, w in enumerate(want))
    assert len(ds.read_all()) == sum(len(x) for x in lines)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert list(zv.open(path).levels) == [0]
    # the dead build's lock (its process is gone from this host) is taken over at once, and the build
    # starts clean (what the dead build left is cleared first)
    zvf.build_pyramid(path, [(2, 1)], lock_timeout=0)
    assert not [f for f in os.listdir(path) if f.startswith(".zvf")]
    assert zvf.open(path).levels == [0, 1]
    assert zvf.validate(path, level=3).ok
