"""LAS/LAZ <-> ZVF: every dimension and extra-bytes field with its dtype, integer X/Y/Z restored exactly."""

import numpy as np
import pytest

import zvf
from tests.support.convert_inputs import make_las

laspy = pytest.importorskip("laspy")


def records(las):
    """Every field of every point, as one structured array sorted the same way (the store reorders points)."""
    names = list(las.point_format.dimension_names)
    cols = {n: np.asarray(las.points[n]) if n in las.point_format.standard_dimension_names
            else np.asarray(las.points.array[n]) for n in names}
    order = np.lexsort((cols["Z"], cols["Y"], cols["X"], cols["gps_time"]))
    return {n: c[order] for n, c in cols.items()}


@pytest.mark.parametrize("suffix,point_format,version", [(".las", 3, "1.2"), (".laz", 6, "1.4"), (".las", 8, "1.4")])
def test_las_round_trip(tmp_path, suffix, point_format, version):
    src = tmp_path / f"in{suffix}"
    orig = make_las(src, point_format=point_format, version=version)
    store = str(tmp_path / "pc.zarrvectors")
    s = zvf.convert(src, store, batch_rows=1234)  # several streamed batches
    assert s["vertices"] == len(orig.points) and s["from"] == ("las")
    with zvf.open(store) as ds:
        assert ds.geometry_type == "point_cloud"
        sel = ds.read_all()
        assert sel.positions.dtype == np.float64
        assert sel.attributes["gps_time"].dtype == np.float64
        assert sel.attributes["classification"].dtype == np.uint8
        assert sel.attributes["temperature"].dtype == np.float32
        assert sel.attributes["normal"].shape == (len(sel), 3)
    out = tmp_path / f"out{suffix}"
    zvf.convert(store, out)
    back = laspy.read(str(out))
    assert str(back.header.version) == version and back.point_format.id == point_format
    assert np.allclose(back.header.scales, orig.header.scales) and np.allclose(back.header.offsets, orig.header.offsets)
    assert [d.name for d in back.point_format.extra_dimensions] == ["temperature", "normal", "label"]
    assert next(back.point_format.extra_dimensions).description == "deg C"
    a, b = records(orig), records(back)
    assert list(a) == list(b)
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        assert np.array_equal(a[name], b[name]), name  # X/Y/Z: the very same integers
    assert back.header.point_count == len(orig.points)
    assert np.allclose(back.header.mins, orig.header.mins) and np.allclose(back.header.maxs, orig.header.maxs)


def test_store_without_las_record_exports(tmp_path):
    rng = np.random.default_rng(1)
    pos = rng.random((300, 3)) * 100
    store = str(tmp_path / "p.zarrvectors")
    zvf.write_points(store, pos, chunk_shape=[50, 50, 50], dtype="float64",
                     attributes={"red": np.arange(300, dtype=np.uint16), "green": np.zeros(300, np.uint16),
                                 "blue": np.ones(300, np.uint16), "weight": rng.random(300).astype(np.float32)})
    zvf.convert(store, tmp_path / "o.las", scale=0.0001)
    back = laspy.read(str(tmp_path / "o.las"))
    assert back.point_format.id == 3 and len(back.points) == 300
    order = np.argsort(np.asarray(back.red))
    assert np.allclose(np.column_stack([back.x, back.y, back.z])[order], pos, atol=1e-4)
    assert np.asarray(back.points.array["weight"]).dtype == np.float32


def test_missing_file_and_unknown_option(tmp_path):
    with pytest.raises(zvf.errors.InvalidArgumentError, match="no such file"):
        zvf.convert(tmp_path / "nope.las", tmp_path / "s.zarrvectors")
    make_las(tmp_path / "a.las", n=10)
    with pytest.raises(zvf.errors.InvalidArgumentError, match="bogus"):
        zvf.convert(tmp_path / "a.las", tmp_path / "s.zarrvectors", bogus=1)
