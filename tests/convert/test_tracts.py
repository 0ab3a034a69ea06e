"""TRK, TCK (nibabel) and TRX (trx-python) <-> ZVF: streamlines, per-point and per-streamline data, groups."""

import numpy as np
import pytest

import zvf
from tests.support.convert_inputs import AFFINE, make_tractogram

nib = pytest.importorskip("nibabel")
from nibabel.streamlines import Field, Tractogram  # noqa: E402 - after importorskip


def same_streamlines(a, b, atol=0.0):
    assert len(a) == len(b)
    assert np.array_equal(a._lengths, b._lengths)
    assert np.allclose(a._data, b._data, atol=atol, rtol=0)


def test_trk_round_trip(tmp_path):
    t = make_tractogram()
    hdr = {Field.VOXEL_TO_RASMM: AFFINE, Field.DIMENSIONS: np.array([91, 109, 91], np.int16),
           Field.VOXEL_SIZES: np.array([2, 2, 2], np.float32), Field.VOXEL_ORDER: "RAS"}
    src = tmp_path / "t.trk"
    nib.streamlines.save(t, str(src), header=hdr)
    orig = nib.streamlines.load(str(src))
    store = str(tmp_path / "t.zarrvectors")
    s = zvf.convert(src, store, batch=64)
    assert s["objects"] == 300
    with zvf.open(store) as ds:
        assert ds.geometry_type == "streamline"
        o = ds.read_object(5)
        assert o.positions.dtype == np.float32 and o.attributes["rgb"].shape == (len(o), 3)
        assert np.array_equal(o.positions, orig.streamlines[5])
        assert ds.object_attribute("weight").dtype == np.float32
    out = tmp_path / "o.trk"
    zvf.convert(store, out)
    back = nib.streamlines.load(str(out))
    for f in (Field.VOXEL_TO_RASMM, Field.DIMENSIONS, Field.VOXEL_SIZES, Field.VOXEL_ORDER):
        assert np.array_equal(np.asarray(back.header[f]), np.asarray(orig.header[f])), f
    same_streamlines(orig.streamlines, back.streamlines, atol=1e-5)  # through the file's voxel space and back
    for k in ("fa", "rgb"):
        same_streamlines(orig.tractogram.data_per_point[k], back.tractogram.data_per_point[k])
        assert back.tractogram.data_per_point[k]._data.dtype == np.float32
    for k in ("weight", "cluster"):
        assert np.array_equal(orig.tractogram.data_per_streamline[k], back.tractogram.data_per_streamline[k])


def test_tck_round_trip(tmp_path):
    t = make_tractogram(seed=1)
    src = tmp_path / "t.tck"
    nib.streamlines.save(Tractogram(t.streamlines, affine_to_rasmm=np.eye(4)), str(src))
    store = str(tmp_path / "t.zarrvectors")
    zvf.convert(src, store)
    out = tmp_path / "o.tck"
    zvf.convert(store, out)
    a, b = nib.streamlines.load(str(src)), nib.streamlines.load(str(out))
    same_streamlines(a.streamlines, b.streamlines)
    assert b.streamlines._data.dtype == np.float32


def test_trx_round_trip_with_groups(tmp_path):
    tmm = pytest.importorskip("trx.trx_file_memmap")
    t = make_tractogram(seed=2)
    ref = {"NB_VERTICES": 0, "VOXEL_TO_RASMM": AFFINE, "DIMENSIONS": np.array([91, 109, 91], np.uint16)}
    trx = tmm.TrxFile.from_tractogram(t, reference=ref, dtype_dict={
        "positions": np.float32, "offsets": np.uint32, "dpv": {"fa": np.float16, "rgb": np.float32},
        "dps": {"weight": np.float32, "cluster": np.float32}})
    trx.groups["left"] = np.array([0, 3, 5, 200], np.uint32)
    trx.groups["right"] = np.array([1, 2, 299], np.uint32)
    src = tmp_path / "t.trx"
    tmm.save(trx, str(src))
    trx.close()
    store = str(tmp_path / "t.zarrvectors")
    zvf.convert(src, store, batch=50)
    with zvf.open(store) as ds:
        assert [g.tolist() for g in ds.groups()] == [[0, 3, 5, 200], [1, 2, 299]]
        assert ds.read_object(0).attributes["fa"].dtype == np.float16
    out = tmp_path / "o.trx"
    zvf.convert(store, out)
    a, b = tmm.load(str(src)), tmm.load(str(out))
    try:
        assert np.allclose(a.header["VOXEL_TO_RASMM"], b.header["VOXEL_TO_RASMM"])
        assert list(a.header["DIMENSIONS"]) == list(b.header["DIMENSIONS"])
        same_streamlines(a.streamlines, b.streamlines)
        for k in ("fa", "rgb"):
            assert a.data_per_vertex[k]._data.dtype == b.data_per_vertex[k]._data.dtype
            assert np.array_equal(a.data_per_vertex[k]._data, b.data_per_vertex[k]._data)
        for k in ("weight", "cluster"):
            assert np.array_equal(np.asarray(a.data_per_streamline[k]), np.asarray(b.data_per_streamline[k]))
        assert {k: v.tolist() for k, v in b.groups.items()} == {"left": [0, 3, 5, 200], "right": [1, 2, 299]}
    finally:
        a.close()
        b.close()


def test_store_geometry_mismatch(tmp_path):
    store = str(tmp_path / "p.zarrvectors")
    zvf.write_points(store, np.random.default_rng(0).random((10, 3)), chunk_shape=[1, 1, 1])
    with pytest.raises(zvf.errors.InvalidArgumentError, match="cannot be written as trk"):
        zvf.convert(store, tmp_path / "o.trk")
    assert not (tmp_path / "o.trk").exists()


def test_trx_refuses_streamlines_without_vertices(tmp_path):
    """nibabel's ArraySequence drops empty streamlines, so a TRX file would renumber every streamline after one:
    the export refuses, naming the objects, and writes no file."""
    pytest.importorskip("trx.trx_file_memmap")
    rng = np.random.default_rng(0)
    lines = [rng.random((4, 3)).astype(np.float32), np.zeros((0, 3), np.float32), rng.random((3, 3)).astype(np.float32)]
    store = str(tmp_path / "s.zarrvectors")
    zvf.write_polylines(store, lines, chunk_shape=[1.0] * 3, geometry_type="streamline")
    out = tmp_path / "o.trx"
    with pytest.raises(zvf.errors.InvalidArgumentError, match=r"without vertices.*object \[1\]"):
        zvf.convert(store, out)
    assert not out.exists()
