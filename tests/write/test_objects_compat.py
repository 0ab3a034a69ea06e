"""zvf and zarr-vectors 0.9.2 write the same object stores, and read each other's.

Each case writes one input with ``zarr_vectors.building.write_polylines /
write_lines / write_graph / write_mesh`` and with zvf, into stores with the same
basename in different directories (the basename lands in the root metadata):

* ``same``: zvf with ``object_index_layout="reference"`` and
  ``reference_quirks()`` -- byte-identical to 0.9.2, file by file;
* ``mine``: zvf's defaults -- differs from 0.9.2 only where that is justified:
  the sharded manifests array, ``row_shape``/``channel_names`` of multi-channel
  vertex attributes (0.9.2 labels them ``row_shape: []``), and the bridge link
  cells of lines (0.9.2 stores a fragment index where a vertex index belongs);
* zarr-vectors 0.9.2 opens ``mine`` (``zv.open``, ``objects[i]``,
  ``select(bbox=...)``, ``validate(level=3)``) with the results it gives for its
  own store, plain ``zarr.open_group`` opens it, and zvf reads it back to the
  input (vertex order, edge direction, face winding).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import zvf
from tests.support.cells import array_meta, cell_payload, nonempty
from tests.support.object_cases import OPTIONS, Case, Options, forest, make_case, random_walks, write_three
from tests.support.reference_bytes import without_section
from tests.support.store_tree import store_files
from zvf.format.codecs import CellCodec
from zvf.format.links import decode_ragged_links, unpermute
from zvf.format.manifest import decode_manifests
from zvf.write.quirks import reference_quirks

GEOMETRIES = ("polyline", "streamline", "line", "graph", "skeleton", "mesh")


# zarr-vectors' reads + validate are slow: one unsharded set (zvf shards the fragment indexes alone), two sharded
ZV_READ_OPTIONS = ("2d-zstd-finebins", "2d-raw-sharded", "3d-zstd-sharded-finebins")


@dataclass
class Written:
    case: Case
    opt: Options
    key: str
    same: object
    mine: object
    ref: object


PARAMS = [(g, o) for g in GEOMETRIES for o in OPTIONS]


@pytest.fixture(scope="module", params=PARAMS, ids=[f"{g}-{o}" for g, o in PARAMS])
def written(request, tmp_path_factory):
    geometry, okey = request.param
    opt = OPTIONS[okey]
    case = make_case(geometry, opt, seed=GEOMETRIES.index(geometry) * 10 + list(OPTIONS).index(okey))
    paths = write_three(case, tmp_path_factory.mktemp(f"{geometry}-{okey}"), geometry)
    return Written(case, opt, okey, paths["same"], paths["mine"], paths["ref"])


def _differing(mine: dict, ref: dict) -> list[str]:
    assert sorted(mine) == sorted(ref), (
        f"only zvf: {sorted(set(mine) - set(ref))[:8]}, only reference: {sorted(set(ref) - set(mine))[:8]}")
    return sorted(k for k in ref if mine[k] != ref[k])


# ---------------------------------------------------------------- bytes


def test_byte_identical_to_reference(written):
    differ = _differing(store_files(written.same), store_files(written.ref))
    assert not differ, f"{len(differ)} files differ, e.g. {differ[:6]}"


def test_defaults_differ_only_where_justified(written):
    mine, ref = without_section(store_files(written.mine)), store_files(written.ref)
    case = written.case

    def justified(key: str) -> bool:
        if case.geometry == "skeleton" and key.startswith("0/") and key != "0/zarr.json" and not key.startswith(
                "0/object_attributes/"):
            return True  # a forest: every tree stored depth-first (see test_skeleton_forest_roots_start_fragments)
        if key.startswith("0/object_index/manifests/"):
            return True  # sharded manifests (zvf's default layout)
        if key.startswith("0/vertex_fragments/") and written.opt.shard is None:
            return True  # fragment indexes in shards (zvf's default layout), the same payloads: checked below
        if any(key == f"0/vertex_attributes/{a}/zarr.json" for a in case.multichannel):
            return True  # row_shape [C] + channel_names instead of 0.9.2's row_shape []
        # bridge rows hold vertex indices, not fragment indices
        return case.geometry == "line" and key.startswith("0/links/0/") and not key.endswith("zarr.json")

    differ = sorted(k for k in set(mine) | set(ref) if mine.get(k) != ref.get(k) and not justified(k))
    assert not differ, f"unjustified differences: {differ[:6]}"
    if written.opt.shard is None and case.geometry != "skeleton":
        assert array_meta(written.mine, "0/vertex_fragments")["codecs"][0]["name"] == "sharding_indexed"
        for chunk in nonempty(written.ref, "0/vertex_fragments"):
            assert cell_payload(written.mine, "0/vertex_fragments", chunk) == cell_payload(
                written.ref, "0/vertex_fragments", chunk), chunk
    for a in case.multichannel:
        attrs = array_meta(written.mine, f"0/vertex_attributes/{a}")["attributes"]
        assert attrs["row_shape"] == [3] and attrs["channel_names"] == ["ch0", "ch1", "ch2"]


# ---------------------------------------------------------------- zarr-vectors and zarr read zvf stores


def _reads(path):
    import zarr_vectors as zv

    return zv.open(str(path)).level(0)


def _same_result(a, b, what):
    assert a.kind == b.kind, what
    assert a.vertex_count == b.vertex_count, what
    assert np.array_equal(np.asarray(a.positions), np.asarray(b.positions)), what
    for f in ("edges", "faces", "object_ids"):
        x, y = getattr(a, f, None), getattr(b, f, None)
        assert (x is None) == (y is None), (what, f)
        if x is not None:
            assert np.array_equal(np.asarray(x), np.asarray(y)), (what, f)


def _rows_of(positions, index_rows) -> list[tuple]:
    """Index rows as rows of positions, sorted: compares connectivity whatever the vertex order."""
    p = np.asarray(positions, np.float32)
    return sorted(tuple(p[r].reshape(-1).tolist()) for r in np.asarray(index_rows, np.int64))


def test_zarr_vectors_reads_zvf_store(written):
    from zarr_vectors.validate import validate

    if written.key not in ZV_READ_OPTIONS:
        pytest.skip("zarr-vectors reads are checked on two option sets per geometry")
    case = written.case
    mine, ref = _reads(written.mine), _reads(written.ref)
    d = written.opt.ndim
    box = ([-20.0] * d, [40.0] * d)
    if case.geometry != "skeleton":
        _same_result(mine.read(), ref.read(), "level(0).read()")
        _same_result(mine.select(bbox=box).read(), ref.select(bbox=box).read(), "select(bbox)")
    else:  # vertex order differs (every tree depth-first); 0.9.2 reads its own forest with an invented edge
        pos, edges = case.args
        got = mine.read()
        every = np.arange(len(pos))[:, None]
        assert _rows_of(got.positions, every) == _rows_of(pos, every)
        assert _rows_of(got.positions, got.edges) == _rows_of(pos, edges)
        a, b = mine.select(bbox=box).read(), ref.select(bbox=box).read()
        assert _rows_of(a.positions, np.arange(a.vertex_count)[:, None]) == _rows_of(
            b.positions, np.arange(b.vertex_count)[:, None])
    if case.geometry in ("polyline", "streamline", "line"):  # 0.9.2 reads objects[i] for these only
        for i in (0, 3, len(mine.objects) - 1):
            got = np.asarray(mine.objects[i].positions)
            _same_result(mine.objects[i], ref.objects[i], f"objects[{i}]")
            expect = np.asarray(case.args[0][i], np.float32)
            assert np.array_equal(got.reshape(-1, d), expect.reshape(-1, d))
    result = validate(str(written.mine), level=3)
    assert result.ok, str(result)[:2000]


def test_plain_zarr_opens_zvf_store(written):
    import zarr

    from tests.support.reference_bytes import unwrap_cell

    g = zarr.open_group(str(written.mine), mode="r")
    arrays = dict(g["0"].arrays())
    assert {"vertices", "vertex_fragments"} <= set(arrays)
    chunk = nonempty(written.mine, "0/vertices")[0]
    origin = array_meta(written.mine, "0/vertices")["attributes"].get("chunk_grid_origin", [0] * len(chunk))
    cell = unwrap_cell(arrays["vertices"][tuple(c - o for c, o in zip(chunk, origin))])
    assert cell == cell_payload(written.mine, "0/vertices", chunk)
    manifests = g["0/object_index/manifests"][:]
    assert len(manifests) == g["0/object_index"].attrs["num_objects"]


# ---------------------------------------------------------------- zvf reads its own store back to the input


async def test_zvf_reads_back_the_input(written):
    import zvf.aio as za

    case = written.case
    ds = await za.open(str(written.mine))
    try:
        if case.geometry in ("polyline", "streamline", "line"):
            objs = case.args[0]
            for i in range(len(objs)):
                sel = await ds.read_object(i)
                expect = np.asarray(objs[i], np.float32).reshape(-1, written.opt.ndim)
                assert np.array_equal(np.asarray(sel.positions), expect), f"object {i}"
            return
        pos, conn = case.args
        pos32 = np.asarray(pos, np.float32)
        oids = case.kwargs.get("object_ids", np.zeros(len(pos), np.int64))
        ids = await ds.object_ids()
        assert ids.tolist() == np.unique(oids).tolist()
        for oid, sel in zip(ids.tolist(), await ds.read_objects(ids)):
            assert _rows_of(sel.positions, np.arange(len(sel.positions))[:, None]) == _rows_of(
                pos32, np.flatnonzero(oids == oid)[:, None])
            got = np.asarray(sel.faces if case.geometry == "mesh" else sel.edges)
            inside = np.all(oids[conn] == oid, axis=1)
            # the object's edges (direction kept) / faces (winding kept) come back, as rows of positions
            assert _rows_of(sel.positions, got) == _rows_of(pos32, conn[inside]), f"object {oid}"
    finally:
        await ds.close()


# ---------------------------------------------------------------- edge cases, each against 0.9.2


def _pair(tmp_path, case: Case, name: str = "s.zarrvectors"):
    ref, same, mine = (tmp_path / d / name for d in ("ref", "same", "mine"))
    for p in (ref, same, mine):
        p.parent.mkdir(exist_ok=True)
    case.ref_write(ref)
    with reference_quirks():
        summary = case.zvf_write(same, object_index_layout="reference")
    differ = _differing(store_files(same), store_files(ref))
    assert not differ, f"{len(differ)} files differ, e.g. {differ[:6]}"
    case.zvf_write(mine)
    return same, mine, summary


def test_polylines_crossing_many_chunks(tmp_path):
    rng = np.random.default_rng(7)
    # big jumps (several chunks per step) and a path that leaves a chunk and comes back
    polys = [rng.uniform(0, 200, (15, 3)),
             np.array([[1, 1, 1], [30, 1, 1], [2, 2, 2], [31, 2, 2], [3, 3, 3.0]]),
             np.array([[5, 5, 5], [180, 180, 180.0]])]
    # int shapes and bounds: 0.9.2 records them as ints
    case = Case("polyline", (polys,), {"chunk_shape": (20, 20, 20), "bounds": ([0] * 3, [200] * 3)})
    _same, mine, summary = _pair(tmp_path, case)
    assert array_meta(mine, "")["attributes"]["zarr_vectors"]["chunk_shape"] == [20, 20, 20]
    chunks = [np.floor(np.asarray(p, np.float32) / 20.0) for p in polys]
    runs = sum(1 + int(np.any(c[1:] != c[:-1], axis=1).sum()) for c in chunks)
    assert summary.fragment_count == runs
    assert summary.cross_chunk_link_count == runs - len(polys)
    names = [p.name for p in (mine / "0/links/0").iterdir() if p.is_dir()]
    assert "+9.+9.+9" in names  # polyline 2 jumps from chunk (0, 0, 0) straight to (9, 9, 9)
    table = decode_manifests(cell_manifests(mine, 3), 3)
    blocks = table.coords[table.object_row == 1]
    assert len(blocks) == 5 and len({tuple(b) for b in blocks.tolist()}) == 2  # chunk revisited: 5 blocks, 2 chunks


def cell_manifests(root, n_objects):
    """The manifests rows of a store (any layout), via zarr."""
    import zarr

    from tests.support.reference_bytes import unwrap_cell

    arr = zarr.open_array(str(root / "0/object_index/manifests"), mode="r")
    return [unwrap_cell(arr[i]) for i in range(n_objects)]


def test_objects_inside_one_chunk(tmp_path):
    polys = [np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 1.0]]), np.array([[7.0, 7.0]])]
    case = Case("polyline", (polys,), {"chunk_shape": (50.0, 50.0), "bounds": ([0.0, 0.0], [100.0, 100.0])})
    _same, mine, summary = _pair(tmp_path, case, "p.zarrvectors")
    assert not (mine / "0/links").exists()  # no bridge: implicit sequential needs nothing
    assert summary.chunk_count == 1 and summary.fragment_count == 2
    pos = np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 1.0]], np.float32)
    gcase = Case("graph", (pos, np.array([[0, 1], [1, 2], [2, 0]])), {"chunk_shape": (50.0, 50.0)})
    (tmp_path / "g").mkdir()
    _same, mine, _ = _pair(tmp_path / "g", gcase, "g.zarrvectors")
    assert sorted(p.name for p in (mine / "0/links/0").iterdir() if p.is_dir()) == ["0.0"]
    assert cell_payload(mine, "0/links/0/0.0", (0, 0)) == np.array([[0, 1], [1, 2], [2, 0]], "<i8").tobytes()


def test_empty_objects(tmp_path):
    polys = [np.zeros((0, 2)), np.array([[1.0, 1.0], [60.0, 1.0]]), np.zeros((0, 2)), np.array([[70.0, 70.0]])]
    case = Case("polyline", (polys,), {"chunk_shape": (50.0, 50.0), "bounds": ([0.0, 0.0], [100.0, 100.0]),
                                       "object_attributes": {"a": np.arange(4.0)}})
    _same, mine, summary = _pair(tmp_path, case, "p.zarrvectors")
    idx = array_meta(mine, "0/object_index")["attributes"]
    assert (idx["num_objects"], idx["num_present"]) == (4, 2)
    rows = cell_manifests(mine, 4)
    assert rows[0] == rows[2] == b"\x00\x00\x00\x00"  # empty manifest, B = 0
    # a store of empty polylines only, and stores with no objects at all
    (tmp_path / "e").mkdir()
    _pair(tmp_path / "e", Case("polyline", ([np.zeros((0, 2))] * 2,), {"chunk_shape": (50.0, 50.0),
                                                                       "bounds": ([0.0, 0.0], [10.0, 10.0])}))
    for geometry, args in (("line", (np.zeros((0, 2, 2)),)), ("graph", (np.zeros((0, 2)), np.zeros((0, 2), int))),
                           ("mesh", (np.zeros((0, 2)), np.zeros((0, 3), int)))):
        (tmp_path / geometry).mkdir()
        _, mine, summary = _pair(tmp_path / geometry, Case(geometry, args, {
            "chunk_shape": (50.0, 50.0), "bounds": ([0.0, 0.0], [10.0, 10.0])}))
        assert summary.object_count == 0 and summary.vertex_count == 0


@pytest.mark.parametrize("bins", ["finer", "one-per-chunk"])
def test_bins(tmp_path, bins):
    rng = np.random.default_rng(3)
    bin_shape = (10.0, 10.0, 10.0) if bins == "finer" else (40.0, 40.0, 40.0)
    polys = random_walks(rng, [20, 10], 3, 0.0, 100.0, 12.0)
    case = Case("streamline", (polys,), {"chunk_shape": (40.0,) * 3, "bin_shape": bin_shape})
    _same, mine, _ = _pair(tmp_path, case)
    assert array_meta(mine, "")["attributes"]["zarr_vectors"]["base_bin_shape"] == list(bin_shape)
    pos = rng.uniform(0, 100, (30, 3)).astype(np.float32)
    faces = np.array([rng.choice(30, 3, replace=False) for _ in range(20)])
    (tmp_path / "m").mkdir()
    _pair(tmp_path / "m", Case("mesh", (pos, faces), {"chunk_shape": (40.0,) * 3, "bin_shape": bin_shape}))


def test_negative_bounds_chunk_grid_origin(tmp_path):
    rng = np.random.default_rng(4)
    pos = rng.uniform(-130, -31, (40, 2)).astype(np.float32)
    edges = rng.integers(0, 40, (50, 2))
    case = Case("graph", (pos, edges), {"chunk_shape": (50.0, 50.0), "bounds": ([-130.0, -130.0], [-30.0, -30.0])})
    _same, mine, _ = _pair(tmp_path, case)
    attrs = array_meta(mine, "0/vertices")
    assert attrs["shape"] == [3, 3] and attrs["attributes"]["chunk_grid_origin"] == [-3, -3]
    assert all(c < 0 for ch in nonempty(mine, "0/vertices") for c in ch)
    for name in (p.name for p in (mine / "0/links/0").iterdir() if p.is_dir()):
        assert array_meta(mine, f"0/links/0/{name}")["attributes"]["chunk_grid_origin"] == [-3, -3]


def test_skeleton_edge_cases(tmp_path):
    # one chain inside one chunk: every edge implied, the intra array exists but stays empty
    pos = np.linspace(1.0, 20.0, 10)[:, None].repeat(3, 1).astype(np.float32)
    chain = np.stack([np.arange(1, 10), np.arange(9)], axis=1)
    _same, mine, summary = _pair(tmp_path, Case("skeleton", (pos, chain), {"chunk_shape": (30.0,) * 3}))
    assert summary.stored_link_count == 0 and nonempty(mine, "0/links/0/0.0.0") == []
    # root last, children listed before parents, tree split over chunks: DFS order and branch rows
    rng = np.random.default_rng(9)
    edges, _, _ = forest(rng, [25])
    pos = rng.uniform(0, 90, (25, 3)).astype(np.float32)
    (tmp_path / "b").mkdir()
    _pair(tmp_path / "b", Case("skeleton", (pos, edges[::-1].copy()),
                               {"chunk_shape": (30.0,) * 3, "link_attributes": {"r": np.arange(24.0)}}))


def test_graph_without_edges_and_mesh_variants(tmp_path):
    rng = np.random.default_rng(11)
    pos = rng.uniform(0, 100, (30, 3)).astype(np.float32)
    kw = {"chunk_shape": (40.0,) * 3, "bounds": ([0.0] * 3, [100.0] * 3)}
    for name, case in {
        "noedges": Case("graph", (pos, np.zeros((0, 2), int)), kw),
        "crossonly": Case("graph", (pos[:2] * [1, 1, 1], np.array([[1, 0]])), dict(kw, bounds=None)),
        "nofaces": Case("mesh", (pos, np.zeros((0, 3), int)), kw),
        "quads": Case("mesh", (pos, rng.integers(0, 30, (25, 4))), dict(kw, object_ids=np.arange(30) % 3 * 1000)),
    }.items():
        (tmp_path / name).mkdir()
        _pair(tmp_path / name, case)


def test_line_links_hold_vertex_indices(tmp_path):
    """0.9.2 writes a fragment index into line bridges; zvf the chunk-local vertex index."""
    ends = np.array([[[1, 1], [2, 2]], [[3, 3], [60, 60]], [[4, 4], [5, 5]], [[61, 61], [62, 62]]], np.float32)
    case = Case("line", (ends,), {"chunk_shape": (50.0, 50.0)})
    same, mine, _ = _pair(tmp_path, case)
    rows_ref, _ = decode_ragged_links(cell_payload(same, "0/links/0/+1.+1", (0, 0)), 2, True)
    rows, perm = decode_ragged_links(cell_payload(mine, "0/links/0/+1.+1", (0, 0)), 2, True)
    assert rows_ref.tolist() == [[1, 0]]  # line 1's endpoint is row 2 of chunk (0, 0), fragment 1
    assert rows.tolist() == [[2, 0]]
    src = np.frombuffer(cell_payload(mine, "0/vertices", (0, 0)), "<f4").reshape(-1, 2)
    dst = np.frombuffer(cell_payload(mine, "0/vertices", (1, 1)), "<f4").reshape(-1, 2)
    a, b = unpermute(rows, perm)[0]
    assert src[a].tolist() == [3, 3] and dst[b].tolist() == [60, 60]


def test_async_api_and_summary(tmp_path):
    import anyio

    import zvf.aio as za

    polys = [np.array([[1.0, 1.0, 1.0], [80.0, 1.0, 1.0]])]

    async def main():
        return await za.write_polylines(str(tmp_path / "a.zarrvectors"), polys, chunk_shape=(50.0,) * 3,
                                        geometry_type="streamline")

    s = anyio.run(main)
    assert (s.geometry, s.object_count, s.vertex_count, s.cross_chunk_link_count) == ("streamline", 1, 2, 1)
    root = array_meta(tmp_path / "a.zarrvectors", "")["attributes"]["zarr_vectors"]
    assert root["geometry_types"] == ["streamline"] and root["links_convention"] == "implicit_sequential"
    codec = CellCodec.from_array_metadata(array_meta(tmp_path / "a.zarrvectors", "0/object_index/manifests"))
    assert codec.shard is not None  # zvf's default manifests layout


def test_skeleton_single_tree_defaults_match_reference(tmp_path):
    rng = np.random.default_rng(21)
    edges, _, _ = forest(rng, [40])
    pos = rng.uniform(0, 100, (40, 3)).astype(np.float32)
    case = Case("skeleton", (pos, edges), {"chunk_shape": (30.0,) * 3, "link_attributes": {"r": rng.random(39)}})
    same, mine, _ = _pair(tmp_path, case)
    def keep(files):  # zvf's layout shards the manifests and fragment indexes (their payloads: below)
        sharded = ("0/object_index/manifests/", "0/vertex_fragments/")
        return {k: v for k, v in files.items() if not k.startswith(sharded)}
    assert not _differing(keep(without_section(store_files(mine))), keep(store_files(same)))
    for chunk in nonempty(same, "0/vertex_fragments"):
        assert cell_payload(mine, "0/vertex_fragments", chunk) == cell_payload(same, "0/vertex_fragments", chunk)


async def test_skeleton_forest_roots_start_fragments(tmp_path):
    """zvf stores every tree depth-first, so no root reads back with an invented parent."""
    import zarr_vectors as zv

    import zvf.aio as za

    rng = np.random.default_rng(22)
    # tree 0: chain rooted at vertex 0; tree 1: chain 5 -> 6 -> 7 -> 8 -> 9 rooted at vertex 9 (last index)
    edges = np.array([[1, 0], [2, 1], [3, 2], [4, 3], [8, 9], [7, 8], [6, 7], [5, 6]])
    oid = np.repeat([0, 1], 5)
    pos = rng.uniform(0, 20, (10, 3)).astype(np.float32)
    case = Case("skeleton", (pos, edges), {"chunk_shape": (30.0,) * 3, "object_ids": oid})
    same, mine, _ = _pair(tmp_path, case)
    truth = _rows_of(pos, edges)
    ref_read = zv.open(str(same)).level(0).read()
    assert len(_rows_of(ref_read.positions, ref_read.edges)) > len(truth)  # 0.9.2's own layout: invented edges
    got = zv.open(str(mine)).level(0).read()
    assert _rows_of(got.positions, got.edges) == truth
    ds = await za.open(str(mine))
    try:
        sels = await ds.read_objects(await ds.object_ids())
        assert sorted(r for s in sels for r in _rows_of(s.positions, s.edges)) == truth
    finally:
        await ds.close()


async def test_groups_on_geometries_0_9_2_cannot_group(tmp_path):
    """Lines, graphs and meshes take groups too (0.9.2's writers for them do not): same layout as polylines."""
    import zarr_vectors as zv
    from zarr_vectors.validate import validate

    import zvf.aio as za

    rng = np.random.default_rng(30)
    pos = rng.uniform(0, 100, (30, 3)).astype(np.float32)
    kw = {"chunk_shape": (50.0,) * 3, "groups": {0: [0, 10], 2: [5]}, "group_attributes": {"g": np.array([1.0, 2, 3])}}
    stores = {
        "mesh": zvf.write_mesh(str(tmp_path / "m.zarrvectors"), pos, rng.integers(0, 30, (20, 3)),
                               object_ids=np.arange(30) % 3 * 5, **kw),
        "graph": zvf.write_graph(str(tmp_path / "g.zarrvectors"), pos, rng.integers(0, 30, (20, 2)),
                                 object_ids=np.arange(30) % 3 * 5, **kw),
        "line": zvf.write_lines(str(tmp_path / "l.zarrvectors"), rng.uniform(0, 100, (11, 2, 3)), **kw),
    }
    for geometry, summary in stores.items():
        path = tmp_path / f"{geometry[0]}.zarrvectors"
        assert summary.group_count == 3
        assert validate(str(path), level=3).ok
        assert len(zv.open(str(path)).level(0).groups) == 3
        ds = await za.open(str(path))
        try:
            assert [g.tolist() for g in await ds.groups()] == [[0, 10], [], [5]]
            assert (await ds.group_attribute("g")).tolist() == [1.0, 2.0, 3.0]
        finally:
            await ds.close()


def test_polyline_attributes_concatenated_or_per_polyline(tmp_path):
    rng = np.random.default_rng(31)
    polys = random_walks(rng, [5, 0, 9], 2, 0.0, 100.0, 20.0)
    per = [rng.random((len(p), 2)).astype(np.float32) for p in polys]
    per[1] = np.zeros(0, np.float32)  # an empty polyline may pass a flat empty array
    zvf.write_polylines(str(tmp_path / "a" / "p.zarrvectors"), polys, chunk_shape=(30.0, 30.0), attributes={"v": per})
    zvf.write_polylines(str(tmp_path / "b" / "p.zarrvectors"), polys, chunk_shape=(30.0, 30.0),
                        attributes={"v": np.concatenate([per[0], per[2]])})
    assert store_files(tmp_path / "a" / "p.zarrvectors") == store_files(tmp_path / "b" / "p.zarrvectors")
