"""Issue 27, layout guards and defaults of conversions: an absurd chunk_shape is said (or refused) before the
upload, converted stores get bins a pyramid can coarsen by, chunk_shape="auto" bounds what an object read
fetches and (issue 26) follows where streamed points are, store -> file convert draws a percent, and query
--out writes the objects/groups tables."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import zvf
from tests.support.clouds import point_clusters
from tests.support.processes import run_zvf_in_pty
from tests.support.walks import streamline_walks
from zvf.cli.main import main
from zvf.config import tuned
from zvf.errors import InvalidArgumentError, LayoutWarning
from zvf.write.layout import PointSample, choose_chunk_shape

laspy = pytest.importorskip("laspy")


def _las(path, n: int, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    header = laspy.LasHeader(point_format=3, version="1.2")
    header.scales, header.offsets = np.array([0.001] * 3), np.zeros(3)
    las = laspy.LasData(header)
    las.x, las.y, las.z = rng.uniform(0, 100, n), rng.uniform(0, 100, n), rng.uniform(0, 10, n)
    las.intensity = rng.integers(0, 1000, n)
    las.write(str(path))
    return str(path)


def _cells(store) -> list:
    """Every chunk cell (and shard) file under a local store."""
    return [p for p in store.rglob("*") if p.is_file() and "/c/" in p.as_posix()] if store.exists() else []


def test_absurd_chunk_shape_is_said_before_the_upload(tmp_path):
    """20 k LAS points at 0.01 m ran 87 s in silence: now a LayoutWarning comes after the spill pass, before any
    cell is uploaded (as an error here, so the store must hold no cell at all)."""
    src = _las(tmp_path / "small.las", 5000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", LayoutWarning)
        with pytest.raises(LayoutWarning, match=r"chunk_shape=\[0.01, 0.01, 0.01\] puts 5,000 vertices in 5,000 "
                                                r"chunks .* chunk_shape='auto' would choose"):
            zvf.convert(src, tmp_path / "out", chunk_shape=[0.01] * 3)
    assert _cells(tmp_path / "out") == []


def test_absurd_chunk_shape_past_the_hard_limit_is_refused(tmp_path, capsys):
    src = _las(tmp_path / "small.las", 3000)
    with tuned(layout_sparse_cells=100, layout_max_sparse_cells=1000):
        with pytest.raises(InvalidArgumentError, match=r"chunk_shape=\[0.01, 0.01, 0.01\] puts 3,000 vertices in "
                                                       r"3,000 chunks .*refused \(more than 1,000 chunks"):
            zvf.convert(src, tmp_path / "api", chunk_shape=[0.01] * 3)
        assert _cells(tmp_path / "api") == []
        assert main(["convert", src, str(tmp_path / "cli"), "--chunk-shape", "0.01,0.01,0.01", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "3,000 chunks" in err[0] and "chunk_shape=" in err[0]


@pytest.mark.filterwarnings("default::zvf.errors.LayoutWarning")  # expected: the CLI prints it, read below
def test_cli_says_a_sparse_layout_on_one_line(tmp_path, capsys):
    src = _las(tmp_path / "small.las", 600)
    with tuned(layout_sparse_cells=100):
        assert main(["convert", src, str(tmp_path / "o"), "--chunk-shape", "0.01,0.01,0.01", "-q"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [err[0]] and err[0].startswith("zvf: warning: chunk_shape=[0.01, 0.01, 0.01] puts 600 vertices")


def test_streamed_points_warn_before_the_upload(tmp_path):
    pos = np.random.default_rng(1).random((5000, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error", LayoutWarning)
        with pytest.raises(LayoutWarning, match="5,000 vertices in 5,000 chunks"):
            zvf.write_points(tmp_path / "s", iter([pos[:2500], pos[2500:]]), chunk_shape=[1e-3] * 3)
    assert _cells(tmp_path / "s") == []


# ---------------------------------------------------------------------------------------------- streamlines


nib = pytest.importorskip("nibabel")


def _walks(n: int, k: int, seed: int = 0) -> list[np.ndarray]:
    """``n`` float32 streamlines of ``k`` 0.5 mm steps from a 100 mm cube."""
    return [p.astype(np.float32) for p in streamline_walks(n, k, seed)]


def _trk(path, lines) -> str:
    from nibabel.streamlines import ArraySequence, Tractogram

    nib.streamlines.save(Tractogram(ArraySequence(lines), affine_to_rasmm=np.eye(4)), str(path))
    return str(path)


def test_converted_streamlines_keep_a_pyramid(tmp_path):
    """No bins by default made the README's factors collapse 10,000 streamlines to 9 vertices at level 1."""
    lines = _walks(2000, 100)
    store = str(tmp_path / "t.zvf")
    zvf.convert(_trk(tmp_path / "t.trk", lines), store)
    zvf.build_pyramid(store, factors=[(2, 1), (2, 2)], chunk_scale_factors=None, cross_level_storage="explicit",
                      seed=0)
    with zvf.open(store) as ds:
        bins = ds.info()["bin_shape"]
        assert bins is not None and all(b < c for b, c in zip(bins, ds.chunk_shape))
        n0 = ds.read_all(level=0).positions.shape[0]
        n1 = ds.read_all(level=1).positions.shape[0]
        kept = [len(ds.read_object(i, level=1)) for i in range(0, 2000, 100)]
    assert n0 == 200_000
    assert 0.02 * n0 < n1 < 0.6 * n0, n1  # a coarser level, not a handful of vertices
    assert np.median(kept) >= 5, kept  # 50 mm streamlines keep their shape


def test_auto_layout_bounds_what_an_object_read_fetches(tmp_path):
    """With chunks sized by vertex count alone (65 536 a chunk) reading three streamlines downloaded tens of MB:
    every chunk an object passes through is fetched whole."""
    lines = _walks(8000, 100, seed=1)
    src = _trk(tmp_path / "t.trk", lines)
    pos = np.concatenate(lines)
    by_count = choose_chunk_shape(pos.min(0), pos.max(0), len(pos))  # what "auto" chose before
    fetched = {}
    for name, shape in (("auto", "auto"), ("by_count", by_count)):
        zvf.convert(src, tmp_path / name, chunk_shape=shape)
        fetched[name] = 0
        for i in (7, 4000, 7999):  # three readers of one streamline each
            with zvf.open(tmp_path / name) as ds:
                assert np.allclose(ds.read_object(i).positions, lines[i], atol=1e-4)  # TRK: via voxels
                fetched[name] += ds.stats.bytes
    own = 3 * 100 * 12
    assert fetched["auto"] <= own + 3 * (2 << 20), fetched  # twice the chooser's budget (1 MiB) an object
    assert fetched["auto"] * 4 < fetched["by_count"], fetched


# ---------------------------------------------------------------------------------------------- store -> file


def test_auto_layout_of_streamed_points_follows_where_they_are(tmp_path):
    """A CSV is measured in a first pass; that pass samples the points (a few batches, thinned past the sample
    size), and clustered points get the finer chunks the extent alone would miss (issue 26)."""
    pos = point_clusters(16_000)  # the ratios of 1 M points to the default settings
    src = tmp_path / "p.csv"
    np.savetxt(src, pos, delimiter=",", header="x,y,z", comments="", fmt="%.17g")
    with tuned(layout_target_points=1024, layout_min_chunk_points=64, layout_sample_points=4000):
        zvf.convert(str(src), tmp_path / "p.zvf", chunk_shape="auto", batch_rows=3000)
        by_extent = choose_chunk_shape(pos.min(0), pos.max(0), len(pos))[0]
        in_memory = choose_chunk_shape(pos.min(0), pos.max(0), len(pos), points=PointSample.of(pos))[0]
    ds = zvf.open(tmp_path / "p.zvf")
    assert ds.chunk_shape == (in_memory,) * 3 and in_memory < by_extent


def test_store_to_file_reports_a_percent(tmp_path):
    store = tmp_path / "p.zvf"
    zvf.write_points(store, np.random.default_rng(2).uniform(0, 100, (30_000, 3)), chunk_shape=[10.0] * 3)
    seen: list[dict] = []
    zvf.convert(store, tmp_path / "p.csv", progress=seen.append)
    assert {p["total"] for p in seen} == {30_000} and seen[-1]["done"] == 30_000
    assert [p["done"] for p in seen] == sorted(p["done"] for p in seen) and len(seen) > 2
    code, shown = run_zvf_in_pty(["convert", str(store), str(tmp_path / "q.las")])
    assert code == 0 and "100.0% 30,000/30,000 vertices" in shown, shown


# ---------------------------------------------------------------------------------------------- query --out


def test_query_out_writes_the_objects_and_groups_of_what_it_read(tmp_path, capsys):
    rng = np.random.default_rng(3)
    lines = [np.cumsum(rng.normal(0, 1, (8, 3)), axis=0) + 30 for _ in range(10)]
    store = str(tmp_path / "t.zvf")
    zvf.write_polylines(store, lines, chunk_shape=(5.0,) * 3, geometry_type="streamline",
                        object_attributes={"length": np.arange(10, dtype=np.float32) + 0.5},
                        groups={0: [1, 4, 9], 1: [2], 2: []})
    out = tmp_path / "q.csv"
    assert main(["query", store, "--objects", "1,2,3", "--out", str(out)]) == 0
    assert str(tmp_path / "q.objects.csv") in capsys.readouterr().out
    objects = np.genfromtxt(tmp_path / "q.objects.csv", delimiter=",", names=True)
    assert objects["object_id"].tolist() == [1, 2, 3] and objects["length"].tolist() == [1.5, 2.5, 3.5]
    groups = np.genfromtxt(tmp_path / "q.groups.csv", delimiter=",", names=True)
    assert groups["group_id"].tolist() == [0, 1] and groups["object_id"].tolist() == [1, 2]
    assert main(["query", store, "--objects", "4", "--out", str(tmp_path / "q.npz")]) == 0
    z = np.load(tmp_path / "q.npz")
    assert z["objects_object_ids"].tolist() == [4] and z["groups_object_ids"].tolist() == [4]
    capsys.readouterr()
    assert main(["query", store, "--objects", "4", "--format", "csv"]) == 0  # stdout: the vertex rows alone
    assert capsys.readouterr().out.count("\n") == 1 + 8
