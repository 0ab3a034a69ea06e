"""PLY (plyfile), Parquet / GeoParquet (pyarrow) and GraphML (networkx) <-> ZVF round trips."""

import json

import numpy as np
import pytest

import zvf


def _sorted_rows(struct):
    names = struct.dtype.names
    return struct[np.lexsort([struct[n] for n in reversed(names)])]


@pytest.mark.parametrize("text", [False, True])
def test_ply_points_round_trip(tmp_path, text):
    plyfile = pytest.importorskip("plyfile")
    rng = np.random.default_rng(0)
    n = 1500
    v = np.empty(n, dtype=[("x", "f4"), ("y", "f4"), ("z", "f4"), ("red", "u1"), ("green", "u1"), ("blue", "u1"),
                           ("intensity", "u2"), ("label", "i4"), ("conf", "f8")])
    for name in ("x", "y", "z"):
        v[name] = rng.random(n) * 10
    for name, hi in (("red", 255), ("green", 255), ("blue", 255), ("intensity", 65535), ("label", 1000)):
        v[name] = rng.integers(0, hi, n)
    v["conf"] = rng.random(n)
    src = tmp_path / "p.ply"
    plyfile.PlyData([plyfile.PlyElement.describe(v, "vertex")], text=text, comments=["made by test"]).write(str(src))
    store = str(tmp_path / "p.zarrvectors")
    zvf.convert(src, store)
    with zvf.open(store) as ds:
        sel = ds.read_all()
        assert sel.positions.dtype == np.float32 and sel.attributes["red"].dtype == np.uint8
    out = tmp_path / "o.ply"
    zvf.convert(store, out)
    back = plyfile.PlyData.read(str(out))
    assert back.text == text and back.comments == ["made by test"]
    bv = back["vertex"].data
    assert bv.dtype == v.dtype  # same properties, order and types
    assert np.array_equal(_sorted_rows(bv), _sorted_rows(v))


def test_ply_mesh_round_trip(tmp_path):
    plyfile = pytest.importorskip("plyfile")
    rng = np.random.default_rng(1)
    n, nf = 200, 300
    v = np.empty(n, dtype=[("x", "f8"), ("y", "f8"), ("z", "f8"), ("quality", "f4"), ("s", "i2")])
    for name in ("x", "y", "z"):
        v[name] = rng.random(n)
    v["quality"], v["s"] = rng.random(n), rng.integers(-100, 100, n)
    faces = np.array([rng.choice(n, 3, replace=False) for _ in range(nf)])
    f = np.empty(nf, dtype=[("vertex_indices", "i4", (3,))])
    f["vertex_indices"] = faces
    src = tmp_path / "m.ply"
    plyfile.PlyData([plyfile.PlyElement.describe(v, "vertex"), plyfile.PlyElement.describe(f, "face")]).write(str(src))
    store = str(tmp_path / "m.zarrvectors")
    s = zvf.convert(src, store)
    assert s["faces"] == nf
    out = tmp_path / "o.ply"
    zvf.convert(store, out)
    back = plyfile.PlyData.read(str(out))
    bv, bf = back["vertex"].data, np.stack(back["face"].data["vertex_indices"])
    assert bv.dtype == v.dtype
    assert np.array_equal(_sorted_rows(bv), _sorted_rows(v))
    # faces as corner records, winding kept (rotate each face to its smallest corner)
    def canon(verts, fs):
        rec = verts[fs]
        key = np.stack([rec[name] for name in ("x", "y", "z")], axis=-1)
        start = np.argmin(key[..., 0], axis=1)
        rolled = np.stack([np.roll(k, -s0, axis=0) for k, s0 in zip(key, start)]).reshape(len(fs), -1)
        return rolled[np.lexsort(rolled.T[::-1])]
    assert np.array_equal(canon(v, faces), canon(bv, bf))


@pytest.mark.parametrize("suffix", [".parquet", ".geoparquet"])
def test_parquet_points_round_trip(tmp_path, suffix):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rng = np.random.default_rng(2)
    n = 3000
    cols = {"x": rng.random(n) * 50, "y": rng.random(n) * 50, "z": rng.random(n) * 5,
            "classification": rng.integers(0, 20, n).astype(np.uint8), "gps_time": rng.random(n) * 1e5,
            "flag": rng.random(n) > 0.5}
    normal = rng.random((n, 3)).astype(np.float32)
    table = pa.table({**cols, "normal": pa.FixedSizeListArray.from_arrays(pa.array(normal.reshape(-1)), 3)})
    if suffix == ".geoparquet":
        from zvf.converters.table import _wkb_array

        geom = _wkb_array(np.column_stack([cols["x"], cols["y"], cols["z"]]))
        table = table.drop_columns(["x", "y", "z"]).append_column("geometry", geom)
        meta = {"version": "1.1.0", "primary_column": "geometry",
                "columns": {"geometry": {"encoding": "WKB", "geometry_types": ["Point Z"]}}}
        table = table.replace_schema_metadata({b"geo": json.dumps(meta).encode()})
    src = tmp_path / f"p{suffix}"
    pq.write_table(table, str(src), row_group_size=700)
    store = str(tmp_path / "p.zarrvectors")
    assert zvf.convert(src, store, batch_rows=500)["vertices"] == n
    out = tmp_path / f"o{suffix}"
    zvf.convert(store, out)
    back = pq.read_table(str(out))
    if suffix == ".geoparquet":
        assert json.loads(back.schema.metadata[b"geo"])["primary_column"] == "geometry"
        from zvf.converters.table import _wkb_points

        xyz = _wkb_points(back.column("geometry").combine_chunks(), "t")
        back = back.drop_columns(["geometry"])
        got = {"x": xyz[:, 0], "y": xyz[:, 1], "z": xyz[:, 2]}
    else:
        got = {k: back.column(k).to_numpy() for k in ("x", "y", "z")}
    got.update({k: back.column(k).to_numpy() for k in ("classification", "gps_time", "flag")})
    got_normal = np.stack(back.column("normal").to_numpy(zero_copy_only=False))
    order_a = np.lexsort((cols["y"], cols["x"]))
    order_b = np.lexsort((got["y"], got["x"]))
    for k in cols:
        assert got[k].dtype == cols[k].dtype, k
        assert np.array_equal(got[k][order_b], cols[k][order_a]), k
    assert got_normal.dtype == np.float32 and np.array_equal(got_normal[order_b], normal[order_a])


def test_parquet_polylines_round_trip(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rng = np.random.default_rng(3)
    oid = np.repeat(np.arange(5), [3, 6, 2, 8, 4])
    t = pa.table({"object_id": oid, "x": rng.random(len(oid)), "y": rng.random(len(oid)), "z": rng.random(len(oid)),
                  "fa": rng.random(len(oid)).astype(np.float32),
                  "object.length": np.repeat(rng.random(5), [3, 6, 2, 8, 4])})
    src = tmp_path / "l.parquet"
    pq.write_table(t, str(src))
    store = str(tmp_path / "l.zarrvectors")
    assert zvf.convert(src, store)["objects"] == 5
    out = tmp_path / "o.parquet"
    zvf.convert(store, out)
    back = pq.read_table(str(out))
    assert back.column_names == ["x", "y", "z", "object_id", "fa", "object.length"]
    for name in t.column_names:
        assert back.column(name).type == t.column(name).type, name
        assert np.array_equal(back.column(name).to_numpy(), t.column(name).to_numpy()), name


def test_graphml_round_trip(tmp_path):
    nx = pytest.importorskip("networkx")
    rng = np.random.default_rng(4)
    g = nx.DiGraph()
    for i in range(40):
        g.add_node(i, x=float(rng.random()), y=float(rng.random()), z=float(rng.random()),
                   weight=float(rng.random()), degree=int(rng.integers(0, 9)), name=f"n{i}")
    for _ in range(70):
        u, v = (int(a) for a in rng.choice(40, 2, replace=False))
        g.add_edge(u, v, length=float(rng.random()), kind=int(rng.integers(0, 3)))
    src = tmp_path / "g.graphml"
    nx.write_graphml(g, str(src))
    store = str(tmp_path / "g.zarrvectors")
    s = zvf.convert(src, store)
    assert s["edges"] == g.number_of_edges()
    with zvf.open(store) as ds:
        o = ds.read_object(0)
        assert o.attributes["degree"].dtype == np.int64 and o.attributes["weight"].dtype == np.float64
        assert o.link_attributes["length"].dtype == np.float64
    out = tmp_path / "o.graphml"
    zvf.convert(store, out)
    h = nx.read_graphml(str(out))
    a = nx.read_graphml(str(src))
    assert h.is_directed() and set(h.nodes) == set(a.nodes)
    for n in a.nodes:
        want = {k: v for k, v in a.nodes[n].items() if k != "name"}  # text data has no ZVF field
        assert h.nodes[n] == want
        assert all(type(h.nodes[n][k]) is type(want[k]) for k in want)
    assert {(u, v): d for u, v, d in h.edges(data=True)} == {(u, v): d for u, v, d in a.edges(data=True)}


def test_ply_refuses_integers_its_properties_cannot_hold(tmp_path):
    pytest.importorskip("plyfile")
    from zvf.errors import InvalidArgumentError

    pos = np.random.default_rng(0).uniform(0, 10, (3, 3)).astype(np.float32)
    zvf.write_points(str(tmp_path / "s"), pos, chunk_shape=[5.0] * 3,
                     attributes={"big": np.array([1, 2**40, 3], np.int64)})
    with pytest.raises(InvalidArgumentError, match="big"):  # PLY has no int64: 2**40 would wrap silently
        zvf.convert(str(tmp_path / "s"), str(tmp_path / "s.ply"))
    assert not (tmp_path / "s.ply").exists()


def test_ply_round_trip_keeps_dtypes_ply_lacks(tmp_path):
    """int64 / uint64 / bool / float16 attributes go out in PLY's nearest type and come back in their own
    (the chain test saw an int64 attribute come back int32 after a store -> PLY -> store)."""
    plyfile = pytest.importorskip("plyfile")
    rng = np.random.default_rng(3)
    pos = rng.uniform(0, 10, (40, 3)).astype(np.float32)
    attrs = {"i64": rng.integers(-5, 5, 40).astype(np.int64), "u64": rng.integers(0, 9, 40).astype(np.uint64),
             "flag": rng.random(40) < 0.5, "half": rng.random(40).astype(np.float16),
             "u8": rng.integers(0, 255, 40).astype(np.uint8)}
    zvf.write_points(str(tmp_path / "s"), pos, chunk_shape=[5.0] * 3, attributes=attrs)
    zvf.convert(str(tmp_path / "s"), str(tmp_path / "s.ply"))
    assert plyfile.PlyData.read(str(tmp_path / "s.ply"))["vertex"].data.dtype["i64"] == np.dtype("i4")
    zvf.convert(str(tmp_path / "s.ply"), str(tmp_path / "back"))
    with zvf.open(str(tmp_path / "back")) as ds:
        got = ds.read_all()
    order = np.lexsort(got.positions.T[::-1])
    want = np.lexsort(pos.T[::-1])
    for name, a in attrs.items():
        assert got.attributes[name].dtype == a.dtype, name
        assert np.array_equal(got.attributes[name][order], a[want]), name
    # a second trip writes no second comment
    zvf.convert(str(tmp_path / "back"), str(tmp_path / "again.ply"))
    comments = plyfile.PlyData.read(str(tmp_path / "again.ply")).comments
    assert sorted(comments) == sorted(f"zvf dtype vertex {n} {a.dtype.name}" for n, a in attrs.items() if n != "u8")


def test_ply_mesh_object_attributes_keep_their_dtype(tmp_path):
    pytest.importorskip("plyfile")
    pos = np.random.default_rng(4).uniform(0, 10, (6, 3))
    faces = np.array([[0, 1, 2], [3, 4, 5]])
    zvf.write_mesh(str(tmp_path / "m"), pos, faces, chunk_shape=[5.0] * 3, object_ids=np.array([0, 0, 0, 7, 7, 7]),
                   object_attributes={"weight": np.array([2**20, -3], np.int64)})
    zvf.convert(str(tmp_path / "m"), str(tmp_path / "m.ply"))
    zvf.convert(str(tmp_path / "m.ply"), str(tmp_path / "back"))
    with zvf.open(str(tmp_path / "back")) as ds:
        w = ds.object_attribute("weight")
    assert w.dtype == np.int64 and w.tolist() == [2**20, -3]


def test_ply_refuses_a_dtype_comment_its_values_do_not_fit(tmp_path):
    plyfile = pytest.importorskip("plyfile")
    from zvf.errors import InputFileError

    v = np.zeros(2, dtype=[("x", "f4"), ("y", "f4"), ("z", "f4"), ("flag", "u1")])
    v["flag"] = [0, 3]
    plyfile.PlyData([plyfile.PlyElement.describe(v, "vertex")], comments=["zvf dtype vertex flag bool"]).write(
        str(tmp_path / "e.ply"))
    with pytest.raises(InputFileError, match="flag"):
        zvf.convert(str(tmp_path / "e.ply"), str(tmp_path / "e"))


def test_graphml_round_trip_keeps_position_dtype_object_ids_and_adds_no_node_id(tmp_path):
    """A store -> GraphML -> store trip gave float64 positions, a ``node_id`` attribute the store never
    had, and object 0 for a store's single object 5 (the chain test)."""
    pytest.importorskip("networkx")
    pos = np.random.default_rng(5).uniform(0, 10, (4, 3)).astype(np.float32)
    zvf.write_graph(str(tmp_path / "g"), pos, np.array([[0, 1], [2, 3]]), chunk_shape=[5.0] * 3,
                    object_ids=np.array([5, 5, 5, 5]))
    zvf.convert(str(tmp_path / "g"), str(tmp_path / "g.graphml"))
    zvf.convert(str(tmp_path / "g.graphml"), str(tmp_path / "back"))
    with zvf.open(str(tmp_path / "back")) as ds:
        got = ds.read_all()
        assert got.positions.dtype == np.float32 and got.attributes == {}
        assert ds.object_ids().tolist() == [5]
        assert np.array_equal(got.positions[np.lexsort(got.positions.T[::-1])], pos[np.lexsort(pos.T[::-1])])


def test_graphml_keeps_a_node_id_attribute_and_its_dtype(tmp_path):
    pytest.importorskip("networkx")
    pos = np.random.default_rng(6).uniform(0, 10, (3, 3))
    zvf.write_graph(str(tmp_path / "g"), pos, np.array([[0, 1]]), chunk_shape=[5.0] * 3,
                    attributes={"node_id": np.array([10, 20, 30], np.int32)})
    zvf.convert(str(tmp_path / "g"), str(tmp_path / "g.graphml"))
    zvf.convert(str(tmp_path / "g.graphml"), str(tmp_path / "back"))
    with zvf.open(str(tmp_path / "back")) as ds:
        ids = ds.read_all().attributes["node_id"]
    assert ids.dtype == np.int32 and sorted(ids.tolist()) == [10, 20, 30]


@pytest.mark.parametrize("ids", [[4, 4, 9], [1.5, 2.5, 3.5]])
def test_table_export_refuses_an_object_id_attribute_that_would_merge_objects(tmp_path, ids):
    """A table's object_id column takes a store's object attribute ``object_id`` (the file ids a table
    import keeps); repeated values made the file merge two polylines into one, silently."""
    pytest.importorskip("pyarrow")
    from zvf.errors import InvalidArgumentError

    rng = np.random.default_rng(8)
    lines = [rng.uniform(0, 10, (3, 3)) for _ in range(3)]
    zvf.write_polylines(str(tmp_path / "p"), lines, chunk_shape=[5.0] * 3,
                        object_attributes={"object_id": np.array(ids)})
    for fmt in ("parquet", "csv"):
        with pytest.raises(InvalidArgumentError, match="object_id"):
            zvf.convert(str(tmp_path / "p"), str(tmp_path / f"p.{fmt}"))


def test_graphml_keeps_channels_and_dtypes_of_every_attribute(tmp_path):
    pytest.importorskip("networkx")
    pos = np.random.default_rng(0).uniform(0, 10, (6, 3))
    zvf.write_graph(str(tmp_path / "g"), pos, np.array([[0, 1], [1, 2], [3, 4]]),
                    object_ids=np.array([0, 0, 0, 7, 7, 7]), chunk_shape=[5.0] * 3,
                    attributes={"rgb": np.arange(18, dtype=np.uint8).reshape(6, 3)},
                    object_attributes={"v": np.array([[1, 2], [3, 4]], np.int16)},
                    link_attributes={"e": np.arange(6, dtype=np.float32).reshape(3, 2)})
    zvf.convert(str(tmp_path / "g"), str(tmp_path / "g.graphml"))
    zvf.convert(str(tmp_path / "g.graphml"), str(tmp_path / "back"), chunk_shape=[5.0] * 3)
    with zvf.open(str(tmp_path / "back")) as ds:
        back = ds.read_all()
        assert back.attributes["rgb"].dtype == np.uint8 and back.attributes["rgb"].shape == (6, 3)
        assert ds.object_attribute("v").dtype == np.int16 and ds.object_attribute("v").tolist() == [[1, 2], [3, 4]]
        assert ds.object_ids().tolist() == [0, 7]
        links = ds.select().read().link_attributes["e"]
        assert links.dtype == np.float32 and sorted(links.tolist()) == [[0, 1], [2, 3], [4, 5]]
