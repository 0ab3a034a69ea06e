"""Issue 27: exports keep everything (object attributes and groups, OBJ names, GeoParquet, the input's row
order with keep_order), several SWC files into one store, and convert's progress with a percent."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest

import zvf
from tests.support.processes import run_zvf_in_pty
from zvf.cli.main import main
from zvf.errors import InvalidArgumentError


@pytest.fixture
def tract_store(tmp_path):
    """A TRK file's streamlines with per-streamline length and cluster, and two groups."""
    rng = np.random.default_rng(5)
    lines = [np.cumsum(rng.normal(0, 1, (int(k), 3)), axis=0) + 30 for k in rng.integers(3, 12, 25)]
    path = str(tmp_path / "t.zvf")
    zvf.write_polylines(path, lines, chunk_shape=(5.0,) * 3, geometry_type="streamline",
                        object_attributes={"length": rng.random(25).astype(np.float32),
                                           "cluster": rng.integers(0, 4, 25).astype(np.int32)},
                        groups={0: [1, 4, 9], 1: [2]})
    return path


@pytest.mark.parametrize("fmt", ["csv", "parquet", "npz"])
def test_export_carries_object_attributes_and_groups(tract_store, tmp_path, fmt):
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    with zvf.open(tract_store) as ds:
        ids = ds.object_ids()
        length, cluster = ds.object_attribute("length"), ds.object_attribute("cluster")
    out = tmp_path / f"o.{fmt}"
    assert main(["export", tract_store, str(out), "-q"]) == 0
    if fmt == "npz":
        z = np.load(out)
        objects = {"object_id": z["objects_object_ids"], "length": z["objects_attr_length"],
                   "cluster": z["objects_attr_cluster"]}
        groups = {"group_id": z["groups_group_ids"], "object_id": z["groups_object_ids"]}
    else:
        def table(path):
            if fmt == "csv":
                rows = np.genfromtxt(path, delimiter=",", names=True)
                return {n: rows[n] for n in rows.dtype.names}
            import pyarrow.parquet as pq

            return {n: c.to_numpy() for n, c in zip(pq.read_table(path).column_names, pq.read_table(path).columns)}
        objects, groups = table(tmp_path / f"o.objects.{fmt}"), table(tmp_path / f"o.groups.{fmt}")
    assert np.array_equal(objects["object_id"], ids)
    assert np.allclose(objects["length"], length) and np.array_equal(objects["cluster"], cluster)
    assert groups["group_id"].tolist() == [0, 0, 0, 1] and groups["object_id"].tolist() == [1, 4, 9, 2]
    if fmt == "parquet":
        assert objects["length"].dtype == np.float32 and objects["cluster"].dtype == np.int32


def test_companion_tables_refuse_stdout_except_npz(tract_store, capsys):
    assert main(["export", tract_store, "-", "--format", "csv", "-q"]) == 2
    assert "objects and groups tables" in capsys.readouterr().err


def test_trk_length_and_cluster_reach_the_exported_tables(tmp_path):
    nib = pytest.importorskip("nibabel")
    from nibabel.streamlines import ArraySequence, Tractogram

    rng = np.random.default_rng(1)
    lines = [np.cumsum(rng.normal(size=(k, 3)), axis=0).astype(np.float32) + 20 for k in (4, 6, 5)]
    dps = {"length": np.array([[4.0], [6.0], [5.0]], np.float32), "cluster": np.array([[1], [0], [1]], np.float32)}
    nib.streamlines.save(Tractogram(ArraySequence(lines), data_per_streamline=dps, affine_to_rasmm=np.eye(4)),
                         str(tmp_path / "t.trk"))
    zvf.convert(tmp_path / "t.trk", tmp_path / "t.zvf")
    assert main(["export", str(tmp_path / "t.zvf"), str(tmp_path / "o.csv"), "-q"]) == 0
    text = (tmp_path / "o.objects.csv").read_text().splitlines()
    assert text[0] == "object_id,cluster,length" and text[1:] == ["0,1,4", "1,0,6", "2,1,5"]


def test_geoparquet_stays_geoparquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from zvf.converters.table import _wkb_array

    pos = np.random.default_rng(0).random((200, 3)) * 10
    table = pa.table({"geom": _wkb_array(pos), "w": np.arange(200)})
    meta = {"version": "1.1.0", "primary_column": "geom",
            "columns": {"geom": {"encoding": "WKB", "geometry_types": ["Point Z"]}}}
    pq.write_table(table.replace_schema_metadata({b"geo": json.dumps(meta).encode()}), str(tmp_path / "g.parquet"))
    zvf.convert(tmp_path / "g.parquet", tmp_path / "g.zvf")
    zvf.convert(tmp_path / "g.zvf", tmp_path / "back.parquet")  # .parquet, not .geoparquet: still GeoParquet
    back = pq.read_table(str(tmp_path / "back.parquet"))
    assert json.loads(back.schema.metadata[b"geo"])["primary_column"] == "geom" and "geom" in back.column_names
    zvf.convert(tmp_path / "g.zvf", tmp_path / "plain.parquet", geo=False)  # unless asked otherwise
    assert b"geo" not in (pq.read_table(str(tmp_path / "plain.parquet")).schema.metadata or {})


@pytest.mark.parametrize("bucket_rows", [None, 37])
def test_keep_order_writes_the_input_order_back(tmp_path, bucket_rows):
    rng = np.random.default_rng(7)
    n = 500
    pos = rng.uniform(0, 100, (n, 3)).round(3)
    w = rng.integers(0, 1000, n)
    (tmp_path / "in.csv").write_text("x,y,z,w\n" + "".join(f"{a},{b},{c},{d}\n" for (a, b, c), d in zip(pos, w)))
    with zvf.config.tuned(convert_batch_rows=bucket_rows) if bucket_rows else contextlib.nullcontext():
        # several spill buckets (and read batches)
        assert main(["convert", str(tmp_path / "in.csv"), str(tmp_path / "s.zvf"), "--keep-order",
                     "--chunk-shape", "20,20,20", "-q"]) == 0
        assert main(["convert", str(tmp_path / "s.zvf"), str(tmp_path / "out.csv"), "-q"]) == 0
    back = np.loadtxt(tmp_path / "out.csv", delimiter=",", skiprows=1)
    assert (tmp_path / "out.csv").read_text().startswith("x,y,z,w\n")
    assert np.array_equal(back[:, :3], pos) and np.array_equal(back[:, 3], w)  # the input's rows, in its order
    zvf.convert(tmp_path / "s.zvf", tmp_path / "spatial.csv", keep_order=False)
    spatial = np.loadtxt(tmp_path / "spatial.csv", delimiter=",", skiprows=1)
    assert not np.array_equal(spatial[:, :3], pos) and spatial.shape == (n, 4)  # chunk order, no row column


def test_keep_order_las_round_trip(tmp_path):
    laspy = pytest.importorskip("laspy")
    rng = np.random.default_rng(3)
    header = laspy.LasHeader(point_format=1, version="1.2")
    header.scales, header.offsets = [0.01] * 3, [0, 0, 0]
    las = laspy.LasData(header)
    las.x, las.y, las.z = (rng.uniform(0, 100, 800) for _ in range(3))
    las.intensity = np.arange(800, dtype=np.uint16)
    las.write(str(tmp_path / "a.las"))
    zvf.convert(tmp_path / "a.las", tmp_path / "a.zvf", keep_order=True, chunk_shape=[30, 30, 30])
    zvf.convert(tmp_path / "a.zvf", tmp_path / "b.las")
    back = laspy.read(str(tmp_path / "b.las"))
    assert np.array_equal(np.asarray(back.intensity), np.arange(800))  # the input's order
    assert np.array_equal(np.asarray(back.X), np.asarray(las.X))
    assert "zvf_source_row" not in list(back.point_format.dimension_names)


def test_keep_order_needs_points(tmp_path):
    (tmp_path / "l.csv").write_text("x,y,z,object_id\n0,0,0,0\n1,1,1,0\n")
    with pytest.raises(InvalidArgumentError, match="keep_order applies to point clouds"):
        zvf.convert(tmp_path / "l.csv", tmp_path / "l.zvf", keep_order=True)
    zvf.write_points(str(tmp_path / "p.zvf"), np.zeros((3, 3)), chunk_shape=(1.0,) * 3)
    with pytest.raises(InvalidArgumentError, match="needs the vertex attribute 'zvf_source_row'"):
        zvf.convert(tmp_path / "p.zvf", tmp_path / "p.csv", keep_order=True)


def _swc(path, z: float, first_id: int = 1) -> None:
    i = first_id
    path.write_text(f"# {path.name}\n{i} 1 0 0 {z} 1 -1\n{i + 1} 3 1 0 {z} 1 {i}\n{i + 2} 3 2 0 {z} 1 {i + 1}\n"
                    f"{i + 10} 1 5 5 {z} 2 -1\n{i + 11} 3 6 5 {z} 2 {i + 10}\n")


@pytest.mark.parametrize("how", ["directory", "glob", "list", "cli"])
def test_several_swc_files_into_one_store(tmp_path, how):
    d = tmp_path / "neurons"
    d.mkdir()
    for k, name in enumerate(["b.swc", "a.swc", "c.swc"]):
        _swc(d / name, z=float(k))  # ids 1..12 in every file
    (d / "README.txt").write_text("not a neuron")
    store = tmp_path / "n.zvf"
    if how == "cli":
        assert main(["convert", str(d / "c.swc"), str(d / "a.swc"), str(d / "b.swc"), str(store), "-q"]) == 0
        order = ["c.swc", "a.swc", "b.swc"]
    else:
        src = {"directory": d, "glob": str(d / "*.swc"),
               "list": [d / "a.swc", d / "b.swc", d / "c.swc"]}[how]
        s = zvf.convert(src, store)
        assert s["files"] == 3 and s["objects"] == 6
        order = ["a.swc", "b.swc", "c.swc"]  # name order
    with zvf.open(str(store)) as ds:
        assert ds.object_ids().tolist() == list(range(6))
        z = {k: float(ds.read_object(2 * k).positions[0, 2]) for k in range(3)}  # two trees per file
        assert ds.root.raw["attributes"]["zvf_source"]["files"] == order
    assert [z[k] for k in range(3)] == [{"b.swc": 0.0, "a.swc": 1.0, "c.swc": 2.0}[n] for n in order]
    zvf.convert(store, tmp_path / "all.swc")
    rows = np.loadtxt(tmp_path / "all.swc")
    assert len(rows) == 15 and len(np.unique(rows[:, 0])) == 15  # ids made unique across files
    assert set(rows[rows[:, 6] >= 0, 6]) <= set(rows[:, 0])  # every parent names a node


def test_several_files_mistakes(tmp_path, capsys):
    d = tmp_path / "mixed"
    d.mkdir()
    _swc(d / "a.swc", 0.0)
    (d / "b.csv").write_text("x,y,z\n1,2,3\n")
    assert main(["convert", str(d), str(tmp_path / "o.zvf")]) == 2
    assert "name the format" in capsys.readouterr().err
    assert main(["convert", str(d), str(tmp_path / "o.zvf"), "--from", "swc", "-q"]) == 0  # the SWC files only
    assert main(["convert", str(tmp_path / "none*.swc"), str(tmp_path / "p.zvf")]) == 2
    assert "matches no file" in capsys.readouterr().err
    (d / "c.csv").write_text("x,y,z\n4,5,6\n")
    assert main(["convert", str(d / "b.csv"), str(d / "c.csv"), str(tmp_path / "q.zvf")]) == 2
    assert "zvf converts several files of swc" in capsys.readouterr().err
    assert main(["convert", str(d / "a.swc"), str(d / "a.swc"), str(tmp_path / "r.csv")]) == 2
    assert "not into a file" in capsys.readouterr().err


def test_convert_reports_progress_with_a_total(tmp_path):
    (tmp_path / "p.csv").write_text("x,y,z\n" + "".join(f"{i},{i % 7},{i % 5}\n" for i in range(3000)))
    seen: list[dict] = []
    zvf.convert(tmp_path / "p.csv", tmp_path / "p.zvf", chunk_shape=[10, 10, 10], batch_rows=1000,
                progress=seen.append)
    assert [p["done"] for p in seen] == [1000, 2000, 3000] and {p["total"] for p in seen} == {3000}
    code, shown = run_zvf_in_pty(["convert", str(tmp_path / "p.csv"), str(tmp_path / "q.zvf"), "--set",
                               "batch_rows=1000"])
    assert code == 0 and "100.0% 3,000/3,000 vertices" in shown, shown
