"""Layouts 0.9.2 writes beyond the plain ones: Draco meshes, attribute-chunked
stores, fragment attributes and link attributes.

Every store is written here by zarr-vectors 0.9.2 from small seeded random
inputs, and zvf's reads are compared with numpy ground truth computed from
those inputs (never with the reference's reader).
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

import zvf
from zvf.errors import FormatError, InvalidArgumentError

pytest.importorskip("zarr_vectors")

CHUNK = 10.0


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def _index_of(points: np.ndarray):
    """Exact position -> input row (inputs are distinct float32 rows)."""
    lut = {tuple(p): i for i, p in enumerate(np.asarray(points, np.float32).tolist())}
    assert len(lut) == len(points)
    return lambda rows: np.array([lut[tuple(r)] for r in np.asarray(rows, np.float32).tolist()], dtype=np.int64)


def _chunk_of(points: np.ndarray) -> np.ndarray:
    return np.floor(points.astype(np.float64) / CHUNK).astype(np.int64)


# --------------------------------------------------------------------------
# Draco meshes
# --------------------------------------------------------------------------


def _draco_input(rng):
    """Tiles of fan-triangulated vertices, one tile (and object) per chunk, all vertices
    used by the tile's faces; plus cross-chunk faces between tiles and one chunk whose
    vertices only cross faces use (Draco stores it as a point cloud)."""
    pos, faces, oids = [], [], []
    tiles = [(0, 0, 0), (1, 0, 0), (0, 1, 1), (1, 1, 0)]
    for k, t in enumerate(tiles):
        n = int(rng.integers(5, 9))
        p = (np.asarray(t) + rng.uniform(0.1, 0.9, (n, 3))) * CHUNK
        base = sum(len(x) for x in pos)
        faces += [[base, base + i, base + i + 1] for i in range(1, n - 1)]
        pos.append(p)
        oids += [k] * n
    lone = (np.asarray((0, 0, 1)) + rng.uniform(0.1, 0.9, (3, 3))) * CHUNK  # no intra faces
    base = sum(len(x) for x in pos)
    pos.append(lone)
    oids += [len(tiles)] * 3
    faces += [[0, base, base + 1], [base + 2, 9, 1]]  # cross-chunk
    return np.concatenate(pos).astype(np.float32), np.asarray(faces, np.int64), np.asarray(oids, np.int64)


@pytest.fixture(scope="module")
def draco_store(tmp_path_factory):
    pytest.importorskip("DracoPy")
    from zarr_vectors.types.meshes import write_mesh

    rng = np.random.default_rng(11)
    pos, faces, oids = _draco_input(rng)
    path = tmp_path_factory.mktemp("draco") / "mesh.zarrvectors"
    _quiet(write_mesh, str(path), pos, faces, chunk_shape=(CHUNK,) * 3, encoding="draco", object_ids=oids,
           vertex_attributes={"w": rng.random(len(pos)).astype(np.float32)})
    return path, pos, faces, oids


def _match(decoded: np.ndarray, truth: np.ndarray, tol: float) -> np.ndarray:
    """Input row of each decoded vertex (nearest), asserting it is within ``tol`` and one-to-one."""
    d = np.linalg.norm(decoded[:, None, :].astype(np.float64) - truth[None, :, :], axis=2)
    near = d.argmin(axis=1)
    assert d[np.arange(len(decoded)), near].max() <= tol
    assert len(np.unique(near)) == len(near)
    return near


def _canon(faces: np.ndarray) -> set:
    """Faces as a set, each rotated to start at its smallest index (winding kept)."""
    out = set()
    for f in np.asarray(faces).tolist():
        k = f.index(min(f))
        out.add(tuple(f[k:] + f[:k]))
    return out


def _tol(pos: np.ndarray) -> float:
    """Half a quantization step of 11 bits over a chunk's largest extent, with slack."""
    return CHUNK / (2**11 - 1) * np.sqrt(3)


def test_draco_full_read_positions_and_intra_faces(draco_store):
    path, pos, faces, oids = draco_store
    with zvf.open(str(path)) as ds:
        sel = ds.read_all()
        assert len(sel) == len(pos)
        near = _match(sel.positions, pos, _tol(pos))
        assert np.array_equal(sel.object_ids, oids[near])
        whole = ds.read_objects(np.unique(oids).tolist(), combined=True)
    chunks = _chunk_of(pos)
    intra = faces[np.all(chunks[faces] == chunks[faces[:, :1]], axis=(1, 2))]
    got = _match(whole.positions, pos, _tol(pos))[whole.faces]
    assert _canon(got) == _canon(intra)  # cross-chunk faces are not recoverable from 0.9.2's Draco stores


def test_draco_object_and_box(draco_store):
    path, pos, faces, oids = draco_store
    chunks = _chunk_of(pos)
    with zvf.open(str(path)) as ds:
        for k in np.unique(oids).tolist():
            sel = ds.read_object(k)
            want = np.flatnonzero(oids == k)
            near = _match(sel.positions, pos, _tol(pos))
            assert sorted(near.tolist()) == want.tolist()
            local = faces[np.all(np.isin(faces, want), axis=1) & np.all(chunks[faces] == chunks[faces[:, :1]],
                                                                             axis=(1, 2))]
            assert _canon(near[sel.faces]) == _canon(local)
        lo, hi = np.array([0.0, 0.0, 0.0]), np.array([20.0, 10.0, 10.0])  # chunks (0,0,0) and (1,0,0)
        sel = ds.query((lo, hi))
        want = np.flatnonzero(np.all((pos >= lo) & (pos <= hi), axis=1))
        assert sorted(_match(sel.positions, pos, _tol(pos)).tolist()) == want.tolist()
        with pytest.raises(FormatError, match="vertex_attributes/w"):
            ds.read_object(0, attributes=["w"])
    assert zvf.validate(str(path), level=5).ok


def test_draco_missing_dependency_names_the_extra(draco_store, monkeypatch):
    path = draco_store[0]
    monkeypatch.setitem(sys.modules, "DracoPy", None)  # import DracoPy -> ImportError
    with zvf.open(str(path)) as ds, pytest.raises(ImportError, match=r"pip install 'zvf\[draco\]'"):
        ds.read_all()


# --------------------------------------------------------------------------
# attribute-chunked stores (chunk_by_attribute)
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def categorized(tmp_path_factory):
    from zarr_vectors.types.points import write_points

    rng = np.random.default_rng(5)
    n = 300
    pos = rng.uniform(-15, 25, (n, 3)).astype(np.float32)
    pos[:8] = np.round(pos[:8] / CHUNK) * CHUNK  # on seams
    cat = rng.choice(np.array([3, 7, 11], np.int32), n)
    w = rng.random((n, 2)).astype(np.float32)
    oids = rng.integers(0, 12, n)
    path = tmp_path_factory.mktemp("cat") / "points.zarrvectors"
    _quiet(write_points, str(path), pos, chunk_shape=(CHUNK,) * 3, vertex_attributes={"cat": cat, "w": w},
           chunk_by_attribute="cat", object_ids=oids)
    return path, pos, cat, w, oids


def _rows(pos, *cols) -> np.ndarray:
    """Rows as sortable float64 records (positions then columns)."""
    cols = [np.asarray(c, np.float64) for c in cols]
    parts = [np.asarray(pos, np.float64)] + [c.reshape(len(c), 1 if c.ndim == 1 else c.shape[1]) for c in cols]
    m = np.concatenate(parts, axis=1)
    return m[np.lexsort(m.T[::-1])]


def test_categorized_full_box_and_categories(categorized):
    path, pos, cat, w, oids = categorized
    rng = np.random.default_rng(1)
    with zvf.open(str(path)) as ds:
        sel = ds.read_all()
        assert np.array_equal(_rows(sel.positions, sel.attributes["cat"], sel.attributes["w"], sel.object_ids),
                              _rows(pos, cat, w, oids))
        for _ in range(12):
            a, b = rng.uniform(-20, 30, (2, 3))
            lo, hi = np.minimum(a, b), np.maximum(a, b)
            if _ % 4 == 0:
                lo, hi = pos[_], pos[_]  # degenerate box on a vertex (some on seams)
            cats = None if _ % 3 else [7, 11]
            got = ds.query((lo, hi), categories=cats)
            keep = np.all((pos >= lo) & (pos <= hi), axis=1)
            if cats is not None:
                keep &= np.isin(cat, cats)
            assert np.array_equal(_rows(got.positions, got.attributes["cat"], got.object_ids),
                                  _rows(pos[keep], cat[keep], oids[keep]))
        only = ds.read_all(categories=[3], attributes=["w"])
        assert set(only.attributes) == {"w"}
        assert np.array_equal(_rows(only.positions, only.attributes["w"]),
                              _rows(pos[cat == 3], w[cat == 3]))
        with pytest.raises(InvalidArgumentError, match="categories"):
            ds.read_all(categories=[4])
    assert zvf.validate(str(path), level=5).ok


def test_where_on_the_chunking_attribute_reads_only_its_categories(categorized):
    """``where`` on the attribute a store is chunked by picks whole categories from metadata:
    only their chunks are read, and it composes with a box, other terms and object ids."""
    path, pos, cat, w, oids = categorized
    lo, hi = np.array([-10.0, -10, -10]), np.array([15.0, 15, 15])
    inbox = np.all((pos >= lo) & (pos <= hi), axis=1)
    with zvf.open(str(path)) as ds:
        for where, keep in (({"cat": 7}, cat == 7), ({"cat": [3, 11]}, np.isin(cat, [3, 11])),
                            ({"cat": (5, 20)}, (cat >= 5) & (cat <= 20)), ({"cat": 4}, np.zeros(len(cat), bool)),
                            ({"cat": 7, "w[0]": (0.0, 0.5)}, (cat == 7) & (w[:, 0] <= 0.5))):
            got = ds.select(bbox=(lo, hi), where=where).read()
            m = keep & inbox
            assert np.array_equal(_rows(got.positions, got.attributes["cat"], got.object_ids),
                                  _rows(pos[m], cat[m], oids[m])), where
        one = ds.select(where={"cat": 3}).read()
        assert np.array_equal(_rows(one.positions), _rows(pos[cat == 3]))
        assert ds.select(where={"cat": 3}).count() == int((cat == 3).sum())  # not the level's count
        chunks = ds.select(where={"cat": 3}).plan().candidate_chunks
        every = ds.select().plan().candidate_chunks
        assert 0 < chunks < every  # the other categories' chunks are never candidates
        got = ds.select(objects=[2, 5], where={"cat": [11]}).read()
        m = np.isin(oids, [2, 5]) & (cat == 11)
        assert np.array_equal(_rows(got.positions, got.object_ids), _rows(pos[m], oids[m]))


def test_categorized_iter_chunks_carries_the_chunking_attribute(categorized):
    """The chunk stream lays rows out as read_all does: the chunking attribute comes back per row."""
    path, pos, cat, w, oids = categorized
    with zvf.open(str(path)) as ds:
        parts = list(ds.iter_chunks(batch_chunks=3))
    got = {k: np.concatenate([p.attributes[k] for p in parts]) for k in ("cat", "w")}
    assert np.array_equal(_rows(np.concatenate([p.positions for p in parts]), got["cat"], got["w"],
                                np.concatenate([p.object_ids for p in parts])),
                          _rows(pos, cat, w, oids))


def test_categorized_objects_span_categories(categorized):
    path, pos, cat, w, oids = categorized
    with zvf.open(str(path)) as ds:
        for k in np.unique(oids).tolist():
            sel = ds.read_object(k)
            m = oids == k
            assert len(np.unique(cat[m])) > 1 or k  # objects do cross categories here
            assert np.array_equal(_rows(sel.positions, sel.attributes["cat"], sel.attributes["w"]),
                                  _rows(pos[m], cat[m], w[m]))
            part = ds.read_object(k, categories=[11])
            m &= cat == 11
            assert np.array_equal(_rows(part.positions, part.attributes["w"]), _rows(pos[m], w[m]))


def test_categorized_polylines(tmp_path):
    from zarr_vectors.types.polylines import write_polylines

    rng = np.random.default_rng(8)
    lines = [np.cumsum(rng.normal(0, 4, (int(rng.integers(3, 9)), 3)), axis=0).astype(np.float32) + 15
             for _ in range(10)]
    cats = [rng.choice(np.array([0, 1], np.int32), len(p)) for p in lines]
    path = tmp_path / "lines.zarrvectors"
    _quiet(write_polylines, str(path), lines, chunk_shape=(CHUNK,) * 3, vertex_attributes={"kind": cats},
           chunk_by_attribute="kind")
    with zvf.open(str(path)) as ds:
        for k, (p, c) in enumerate(zip(lines, cats)):
            sel = ds.read_object(k)
            assert np.array_equal(_rows(sel.positions, sel.attributes["kind"]), _rows(p, c))
        lo, hi = np.array([10.0, 10, 10]), np.array([20.0, 20, 20])
        got = ds.query((lo, hi), categories=[1], clip=True)
        allp, allc = np.concatenate(lines), np.concatenate(cats)
        keep = np.all((allp >= lo) & (allp <= hi), axis=1) & (allc == 1)
        assert np.array_equal(_rows(got.positions), _rows(allp[keep]))


# --------------------------------------------------------------------------
# fragment attributes
# --------------------------------------------------------------------------


def test_fragment_attributes_per_fragment_and_object(tmp_path):
    from zarr_vectors.types.points import write_points

    rng = np.random.default_rng(3)
    pos = rng.uniform(0, 30, (200, 3)).astype(np.float32)
    oids = rng.integers(0, 9, len(pos))
    chunks = _chunk_of(pos)
    truth = {}  # (chunk, object id) -> value; fragment order in a chunk = ascending object id
    score = {}
    for c in {tuple(x) for x in chunks.tolist()}:
        present = np.unique(oids[np.all(chunks == c, axis=1)])
        vals = rng.random((len(present), 2)).astype(np.float32)
        score[c] = vals
        truth.update({(c, int(o)): v for o, v in zip(present, vals)})
    path = tmp_path / "frag.zarrvectors"
    _quiet(write_points, str(path), pos, chunk_shape=(CHUNK,) * 3, object_ids=oids,
           fragment_attributes={"score": score})
    with zvf.open(str(path)) as ds:
        rows = ds.fragment_attribute("score")
        got = {(tuple(c), int(f)): v for c, f, v in zip(rows.chunks.tolist(), rows.fragments, rows.values)}
        assert len(got) == len(truth)
        for c, vals in score.items():
            for f, v in enumerate(vals):
                assert np.array_equal(got[(c, f)], v)
        for k in range(9):
            per = ds.fragment_attribute("score", objects=[k])
            assert set(per.object_ids.tolist()) <= {k}
            want = {c: v for (c, o), v in truth.items() if o == k}
            assert {tuple(c) for c in per.chunks.tolist()} == set(want)
            for c, v in zip(per.chunks.tolist(), per.values):
                assert np.array_equal(v, want[tuple(c)])
        with pytest.raises(InvalidArgumentError, match="nope"):
            ds.fragment_attribute("nope")
    assert zvf.validate(str(path), level=5).ok


# --------------------------------------------------------------------------
# link attributes (intra- and cross-chunk)
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def graph_store(tmp_path_factory):
    from zarr_vectors.types.graphs import write_graph

    rng = np.random.default_rng(21)
    n = 60
    pos = rng.uniform(0, 30, (n, 3)).astype(np.float32)
    oids = np.sort(rng.integers(0, 5, n))
    edges = []
    for k in range(5):
        members = np.flatnonzero(oids == k)
        if len(members) > 1:
            e = rng.choice(members, (2 * len(members), 2))
            edges.append(e[e[:, 0] != e[:, 1]])
    edges = np.unique(np.concatenate(edges), axis=0)
    edges = edges[rng.permutation(len(edges))]
    wt = rng.random(len(edges)).astype(np.float32)
    pair = rng.integers(-50, 50, (len(edges), 2)).astype(np.int32)
    path = tmp_path_factory.mktemp("graph") / "graph.zarrvectors"
    _quiet(write_graph, str(path), pos, edges, chunk_shape=(CHUNK,) * 3, object_ids=oids,
           link_attributes={"wt": wt, "pair": pair})
    return path, pos, oids, edges, {"wt": wt, "pair": pair}


def _edge_truth(edges, attrs):
    return {tuple(e): {n: v[i] for n, v in attrs.items()} for i, e in enumerate(edges.tolist())}


def test_link_attributes_with_object_reads(graph_store):
    path, pos, _, edges, attrs = graph_store
    idx = _index_of(pos)
    truth = _edge_truth(edges, attrs)
    chunks = _chunk_of(pos)
    assert (chunks[edges[:, 0]] != chunks[edges[:, 1]]).any(axis=1).any()  # cross-chunk edges present
    with zvf.open(str(path)) as ds:
        seen = 0
        for sel in ds.read_objects(list(range(5))):
            g = idx(sel.positions)
            assert set(sel.link_attributes) == {"wt", "pair"}
            assert len(sel.link_attributes["wt"]) == len(sel.edges)
            for r, e in enumerate(g[sel.edges].tolist()):
                for n in attrs:
                    assert np.array_equal(sel.link_attributes[n][r], truth[tuple(e)][n])
            seen += len(sel.edges)
        assert seen == len(edges)
        comb = ds.read_objects([4, 1, 4], combined=True)
        g = idx(comb.positions)
        for r, e in enumerate(g[comb.edges].tolist()):
            assert comb.link_attributes["wt"][r] == truth[tuple(e)]["wt"]


def test_link_attributes_with_box_query(graph_store):
    path, pos, _, edges, attrs = graph_store
    idx = _index_of(pos)
    truth = _edge_truth(edges, attrs)
    lo, hi = np.array([0.0, 0.0, 0.0]), np.array([22.0, 25.0, 30.0])
    inside = np.all((pos >= lo) & (pos <= hi), axis=1)
    with zvf.open(str(path)) as ds:
        sel = ds.query((lo, hi))
    got = idx(sel.positions)[sel.edges]
    assert len(got) == int(np.all(inside[edges], axis=1).sum())
    for r, e in enumerate(got.tolist()):
        assert np.array_equal(sel.link_attributes["pair"][r], truth[tuple(e)]["pair"])
