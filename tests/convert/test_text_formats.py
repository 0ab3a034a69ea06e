"""CSV, OBJ, STL and SWC <-> ZVF round trips (no extra needed)."""

import numpy as np
import pytest

import zvf
from zvf.converters.mesh import read_obj, read_stl


def test_csv_points_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    n = 2000
    pos = rng.random((n, 3)) * 100
    label = rng.integers(-5, 500, n)
    weight = rng.random(n)
    normal = rng.random((n, 3))
    src = tmp_path / "p.csv"
    table = np.column_stack([pos, label, weight, normal])
    np.savetxt(src, table, delimiter=",", header="x,y,z,label,weight,normal_0,normal_1,normal_2", comments="",
               fmt=["%.17g"] * 3 + ["%d"] + ["%.17g"] * 4)
    store = str(tmp_path / "p.zarrvectors")
    s = zvf.convert(src, store, batch_rows=300)
    assert s["vertices"] == n
    with zvf.open(store) as ds:
        sel = ds.read_all()
    assert sel.attributes["label"].dtype == np.int64 and sel.attributes["weight"].dtype == np.float64
    assert sel.attributes["normal"].shape == (n, 3)
    out = tmp_path / "o.csv"
    zvf.convert(store, out)
    back = np.loadtxt(out, delimiter=",", skiprows=1)
    with open(out) as fh:
        assert fh.readline().strip() == "x,y,z,label,normal_0,normal_1,normal_2,weight"
    a = table[np.lexsort(table.T[::-1])]
    b = back[:, [0, 1, 2, 3, 7, 4, 5, 6]]
    b = b[np.lexsort(b.T[::-1])]
    assert np.array_equal(a, b)


def test_csv_polylines_with_object_columns(tmp_path):
    rng = np.random.default_rng(1)
    lens = [4, 1, 7, 3]
    ids = np.repeat([10, 3, 7, 42], lens)
    pos = rng.random((len(ids), 3))
    fa = rng.random(len(ids))
    score = np.repeat([0.5, 1.5, 2.5, 3.5], lens)
    src = tmp_path / "l.csv"
    perm = rng.permutation(len(ids))  # rows of objects interleaved; order within an object kept
    perm = np.concatenate([np.sort(perm[ids[perm] == i]) for i in (10, 3, 7, 42)])
    rows = np.column_stack([ids, pos, fa, score])[np.sort(perm)]
    np.savetxt(src, rows, delimiter=",", header="object_id,x,y,z,fa,object.score", comments="",
               fmt=["%d"] + ["%.17g"] * 5)
    store = str(tmp_path / "l.zarrvectors")
    zvf.convert(src, store, geometry="streamline")
    with zvf.open(store) as ds:
        assert ds.geometry_type == "streamline"
        assert ds.object_attribute("object_id").tolist() == [3, 7, 10, 42]
        assert ds.object_attribute("score").tolist() == [1.5, 2.5, 0.5, 3.5]
        first = ds.read_object(0)
        assert np.array_equal(first.positions, pos[ids == 3])
    out = tmp_path / "o.csv"
    zvf.convert(store, out)
    back = np.loadtxt(out, delimiter=",", skiprows=1)
    with open(out) as fh:
        assert fh.readline().strip() == "x,y,z,object_id,fa,object.score"
    for oid in (10, 3, 7, 42):
        got = back[back[:, 3] == oid]
        want = rows[rows[:, 0] == oid]
        assert np.array_equal(got[:, [0, 1, 2, 4, 5]], want[:, [1, 2, 3, 4, 5]])


def _obj_text(faces_by_obj, colors):
    lines = ["# test"]
    base = 0
    for k, (p, f) in enumerate(faces_by_obj):
        lines.append(f"o part{k}")
        lines += ["v " + " ".join(repr(float(c)) for c in row) for row in np.hstack([p, colors[base:base + len(p)]])]
        lines += ["f " + " ".join(f"{i + 1 + base}/{i + 1 + base}/1" for i in tri) for tri in f]
        base += len(p)
    return "\n".join(lines) + "\n"


def _mesh_canon(pos, faces):
    """Faces as sorted rows of corner coordinates, each face rotated to start at its smallest corner."""
    tri = pos[faces]  # (F, L, 3)
    first = np.array([np.lexsort(t.T[::-1])[0] for t in tri])
    rolled = np.stack([np.roll(t, -s, axis=0) for t, s in zip(tri, first)])
    flat = rolled.reshape(len(tri), -1)
    return flat[np.lexsort(flat.T[::-1])]


def test_obj_round_trip_with_objects_and_colors(tmp_path):
    rng = np.random.default_rng(2)
    parts = []
    for k in range(3):
        p = rng.random((20, 3)) + k
        f = np.array([rng.choice(20, 3, replace=False) for _ in range(25)])
        parts.append((p, f))
    colors = rng.random((60, 3)).astype(np.float32).astype(np.float64)
    src = tmp_path / "m.obj"
    src.write_text(_obj_text(parts, colors))
    store = str(tmp_path / "m.zarrvectors")
    s = zvf.convert(src, store)
    assert s["objects"] == 3 and s["faces"] == 75
    out = tmp_path / "o.obj"
    zvf.convert(store, out)
    pos0, f0, o0, a0, n0 = read_obj(str(src))
    pos1, f1, o1, a1, n1 = read_obj(str(out))
    assert np.array_equal(np.unique(o0), np.unique(o1))
    assert n1 == n0 and len(n0) == 3  # the objects' names come back (issue 27: they came back as object_k)
    for k in range(3):
        sel0 = np.flatnonzero(o0 == k)
        sel1 = np.flatnonzero(o1 == k)
        ff0 = f0[np.isin(f0[:, 0], sel0)]
        ff1 = f1[np.isin(f1[:, 0], sel1)]
        assert np.array_equal(_mesh_canon(pos0, ff0), _mesh_canon(pos1, ff1))
        rows0 = np.column_stack([pos0[sel0], a0["color"][sel0]])
        rows1 = np.column_stack([pos1[sel1], a1["color"][sel1]])
        assert np.array_equal(rows0[np.lexsort(rows0.T[::-1])], rows1[np.lexsort(rows1.T[::-1])])
    assert a1["color"].dtype == np.float32


@pytest.mark.parametrize("ascii_in", [False, True])
def test_stl_round_trip(tmp_path, ascii_in):
    from zvf.converters.mesh import write_stl

    rng = np.random.default_rng(3)
    verts = rng.random((30, 3)).astype(np.float32).astype(np.float64)
    faces = np.array([rng.choice(30, 3, replace=False) for _ in range(40)])
    src = tmp_path / "m.stl"
    write_stl(str(src), verts[faces], ascii=ascii_in)
    if not ascii_in:  # the binary file as numpy-stl style readers see it
        assert src.stat().st_size == 84 + 50 * 40
    store = str(tmp_path / "m.zarrvectors")
    s = zvf.convert(src, store)
    assert s["vertices"] == len(np.unique(verts[faces].reshape(-1, 3), axis=0))
    out = tmp_path / "o.stl"
    back = zvf.convert(store, out, ascii=not ascii_in)
    assert back["vertices"] == s["vertices"] and back["faces"] == 40  # the store's vertices, as other formats count
    a, b = read_stl(str(src)), read_stl(str(out))
    assert a.shape == b.shape
    assert np.array_equal(_mesh_canon(a.reshape(-1, 3), np.arange(len(a) * 3).reshape(-1, 3)),
                          _mesh_canon(b.reshape(-1, 3), np.arange(len(b) * 3).reshape(-1, 3)))


def test_swc_round_trip(tmp_path):
    rng = np.random.default_rng(4)
    n = 60
    parent = np.array([-1] + [int(rng.integers(1, i + 1)) for i in range(1, 40)] + [-1]
                      + [int(rng.integers(41, i + 41)) for i in range(1, 20)])
    ids = np.arange(1, n + 1)
    table = np.column_stack([ids, rng.integers(1, 5, n), rng.random((n, 3)) * 100, rng.random(n) + 0.1, parent])
    src = tmp_path / "n.swc"
    with open(src, "w") as fh:
        fh.write("# ORIGINAL_SOURCE test\n# two trees\n")
        np.savetxt(fh, table, fmt="%d %d %.17g %.17g %.17g %.17g %d")
    store = str(tmp_path / "n.zarrvectors")
    s = zvf.convert(src, store)
    assert s["objects"] == 2 and s["vertices"] == n
    with zvf.open(store) as ds:
        assert ds.geometry_type == "skeleton"
        sel = ds.read_object(0)
        assert sel.attributes["type"].dtype == np.int32 and sel.attributes["radius"].dtype == np.float64
    out = tmp_path / "o.swc"
    zvf.convert(store, out)
    assert out.read_text().startswith("# ORIGINAL_SOURCE test\n# two trees\n")
    assert np.array_equal(np.loadtxt(out), table)


def test_direction_errors(tmp_path):
    with pytest.raises(zvf.errors.InvalidArgumentError, match="one file and one ZVF store"):
        zvf.convert(tmp_path / "a.csv", tmp_path / "b.csv")
    with pytest.raises(zvf.errors.InvalidArgumentError, match="one file and one ZVF store"):
        zvf.convert(tmp_path / "a", tmp_path / "b")
    with pytest.raises(zvf.errors.InvalidArgumentError, match="unknown format"):
        zvf.convert(tmp_path / "a", tmp_path / "b", from_="xyz")
