"""LAS/LAZ <-> ZVF: every dimension and extra-bytes field with its dtype, integer X/Y/Z restored exactly."""

import numpy as np
import pytest

import zvf

laspy = pytest.importorskip("laspy")


def make_las(path, n=5000, point_format=3, version="1.2", seed=0):
    rng = np.random.default_rng(seed)
    header = laspy.LasHeader(point_format=point_format, version=version)
    header.add_extra_dim(laspy.ExtraBytesParams(name="temperature", type=np.float32, description="deg C"))
    header.add_extra_dim(laspy.ExtraBytesParams(name="normal", type="3f8"))
    header.add_extra_dim(laspy.ExtraBytesParams(name="label", type=np.int16))
    header.scales = np.array([0.01, 0.01, 0.001])
    header.offsets = np.array([500000.0, 4100000.0, 10.0])
    las = laspy.LasData(header)
    las.X = rng.integers(0, 200000, n, dtype=np.int32)
    las.Y = rng.integers(-100000, 100000, n, dtype=np.int32)
    las.Z = rng.integers(0, 50000, n, dtype=np.int32)
    las.intensity = rng.integers(0, 65535, n).astype(np.uint16)
    las.return_number = rng.integers(1, 5, n).astype(np.uint8)
    las.number_of_returns = np.full(n, 5, np.uint8)
    las.classification = rng.integers(0, 31 if point_format < 6 else 255, n).astype(np.uint8)
    las.synthetic = rng.integers(0, 2, n).astype(np.uint8)
    las.point_source_id = rng.integers(0, 9, n).astype(np.uint16)
    las.gps_time = rng.random(n) * 1e6
    if "red" in las.point_format.dimension_names:
        las.red = rng.integers(0, 65535, n).astype(np.uint16)
        las.green = rng.integers(0, 65535, n).astype(np.uint16)
        las.blue = rng.integers(0, 65535, n).astype(np.uint16)
    las.temperature = rng.random(n).astype(np.float32) * 40
    las.normal = rng.random((n, 3))
    las.label = rng.integers(-300, 300, n).astype(np.int16)
    las.write(str(path))
    return laspy.read(str(path))


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
