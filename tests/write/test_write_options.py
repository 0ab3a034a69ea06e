"""Writer options: positions keep their float dtype in every writer (streamed too), and the
common keywords (``zvf.WriteOptions``) are checked once, naming a bad one."""

from __future__ import annotations

import numpy as np
import pytest

import zvf
from tests.support.store_tree import store_files
from zvf.errors import InvalidArgumentError

CHUNK = (0.5, 0.5, 0.5)


def _near_1e6(rng, n):
    """float64 coordinates float32 cannot hold (its step at 1e6 is 0.0625)."""
    return 1e6 + rng.random((n, 3))


def _write(kind: str, path, pos, **kw):
    n = len(pos)
    if kind == "polylines":
        return zvf.write_polylines(path, [pos[: n // 2], pos[n // 2:]], chunk_shape=CHUNK, **kw)
    if kind == "lines":
        return zvf.write_lines(path, pos[: n - n % 2].reshape(-1, 2, 3), chunk_shape=CHUNK, **kw)
    if kind == "graph":
        return zvf.write_graph(path, pos, np.stack([np.arange(1, n), np.arange(n - 1)], axis=1), chunk_shape=CHUNK,
                               geometry_type="skeleton", **kw)
    return zvf.write_mesh(path, pos, np.arange(n - n % 3).reshape(-1, 3), chunk_shape=CHUNK, **kw)


def _stored(path) -> np.ndarray:
    """Every object's vertices in input order (objects by id)."""
    with zvf.open(path) as ds:
        return np.concatenate([s.positions for s in ds.read_objects(ds.object_ids())])


KINDS = ("polylines", "lines", "graph", "mesh")


@pytest.mark.parametrize("kind", KINDS)
def test_float64_round_trips_exactly(tmp_path, kind):
    pos = _near_1e6(np.random.default_rng(1), 12)
    _write(kind, tmp_path / "s", pos)
    got = _stored(tmp_path / "s")
    assert got.dtype == np.float64
    assert np.array_equal(np.sort(got, axis=0), np.sort(pos, axis=0))  # skeletons are stored depth-first


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("given", "dtype", "stored"), [
    (np.float32, None, np.float32),
    (np.float16, None, np.float16),
    (np.int32, None, np.float32),  # integers: 0.9.2's float32
    (np.float64, "float32", np.float32),  # an explicit dtype wins
])
def test_stored_dtype(tmp_path, kind, given, dtype, stored):
    pos = (np.random.default_rng(2).random((12, 3)) * 4).astype(given)
    _write(kind, tmp_path / "s", pos, **({} if dtype is None else {"dtype": dtype}))
    got = _stored(tmp_path / "s")
    assert got.dtype == stored
    assert np.array_equal(np.sort(got, axis=0), np.sort(pos.astype(stored), axis=0))


def _graph_batches(parts):
    for p in parts:
        yield {"positions": p, "edges": [[1, 0]]}


@pytest.mark.parametrize("stream", [
    lambda t, parts, **kw: zvf.write_polylines(t, iter([[p] for p in parts]), chunk_shape=CHUNK, **kw),
    lambda t, parts, **kw: zvf.write_lines(t, iter([p[:2].reshape(1, 2, 3) for p in parts]), chunk_shape=CHUNK, **kw),
    lambda t, parts, **kw: zvf.write_graph(t, _graph_batches(parts), chunk_shape=CHUNK, **kw),
    lambda t, parts, **kw: zvf.write_points(t, iter(parts), chunk_shape=CHUNK, **kw),
], ids=["polylines", "lines", "graph", "points"])
def test_stream_dtype_fixed_by_first_batch(tmp_path, stream):
    rng = np.random.default_rng(3)
    wide, narrow = _near_1e6(rng, 4), _near_1e6(rng, 4).astype(np.float32)
    stream(tmp_path / "a", [wide, narrow])  # float32 after float64: widened exactly
    with zvf.open(tmp_path / "a") as ds:
        assert ds.read_all().positions.dtype == np.float64
    with pytest.raises(InvalidArgumentError, match=r"batches\[1\].*float64 but the first batch fixed .*float32"):
        stream(tmp_path / "b", [narrow, wide])  # would round 1e6 + x silently
    stream(tmp_path / "c", [narrow, wide], dtype="float64")
    with zvf.open(tmp_path / "c") as ds:
        assert ds.read_all().positions.dtype == np.float64


def test_options_dict_matches_keywords(tmp_path):
    pos = _near_1e6(np.random.default_rng(4), 30)
    opts: zvf.WriteOptions = {"compression": "zstd", "shard_shape": 2, "dtype": "float32",
                              "object_index_layout": "reference", "groups": {0: [0]}}
    zvf.write_mesh(tmp_path / "a" / "m", pos, np.arange(30).reshape(-1, 3), chunk_shape=CHUNK, **opts)
    zvf.write_mesh(tmp_path / "b" / "m", pos, np.arange(30).reshape(-1, 3), chunk_shape=CHUNK, compression="zstd",
                   shard_shape=2, dtype="float32", object_index_layout="reference", groups={0: [0]})
    assert store_files(tmp_path / "a" / "m") == store_files(tmp_path / "b" / "m")
    with pytest.raises(zvf.errors.StoreExistsError, match="a store exists"):
        zvf.write_mesh(tmp_path / "a" / "m", pos, np.arange(30).reshape(-1, 3), chunk_shape=CHUNK)
    zvf.write_mesh(tmp_path / "a" / "m", pos, np.arange(30).reshape(-1, 3), chunk_shape=CHUNK, overwrite=True)


@pytest.mark.parametrize(("kw", "match"), [
    ({"dtyp": "float32"}, "unexpected keyword argument 'dtyp'"),
    ({"dtype": "int16"}, "dtype must be a float type"),
    ({"dtype": "nonsense"}, "dtype 'nonsense' is not a numpy dtype"),
    ({"object_index_layout": "flat"}, "object_index_layout must be one of"),
    ({"overwrite": "yes"}, "overwrite must be True or False"),
])
@pytest.mark.parametrize("streamed", [False, True])
def test_bad_options_are_named(tmp_path, kw, match, streamed):
    pos = np.zeros((3, 3))
    with pytest.raises(InvalidArgumentError, match=match):
        zvf.write_points(tmp_path / "p", iter([pos]) if streamed else pos, chunk_shape=CHUNK, **kw)
    with pytest.raises(InvalidArgumentError, match=match):
        zvf.write_polylines(tmp_path / "l", iter([[pos]]) if streamed else [pos], chunk_shape=CHUNK, **kw)
    assert not (tmp_path / "p").exists() and not (tmp_path / "l").exists()


def test_unknown_keyword_is_also_a_type_error(tmp_path):
    """Python raises TypeError for an unexpected keyword; zvf's error is both, so either catch works."""
    with pytest.raises(TypeError, match="unexpected keyword argument 'chunk_shap'"):
        zvf.write_points(tmp_path / "p", np.zeros((3, 3)), chunk_shape=CHUNK, chunk_shap=CHUNK)
    assert not (tmp_path / "p").exists()


def test_write_options_is_public():
    assert zvf.WriteOptions.__optional_keys__ >= {"bin_shape", "dtype", "overwrite", "storage_options"}
    assert "WriteOptions" in dir(zvf)


@pytest.mark.parametrize("writer", ["write_points", "write_polylines"])
def test_batches_refuse_auto_shapes_clearly(tmp_path, writer):
    """'auto' needs the whole input's extent and count; from batches it is refused before any batch is read."""
    pos = np.zeros((3, 3))
    batches = iter([pos]) if writer == "write_points" else iter([[pos]])
    with pytest.raises(InvalidArgumentError, match="'auto' needs the whole input"):
        getattr(zvf, writer)(tmp_path / "s", batches, chunk_shape="auto")
    assert not (tmp_path / "s").exists()


def test_fragment_shards_follow_the_grid():
    """zvf's layout shards an object level's fragment indexes about 64 chunks to a shard, clipped to the grid."""
    from zvf.format.codecs import CellCodec
    from zvf.write.level import fragment_shard

    plain = CellCodec.for_writing(None)
    assert fragment_shard(plain, "sharded", (8, 8, 8)) == (4, 4, 4)
    assert fragment_shard(plain, "sharded", (2, 9, 1)) == (2, 4, 1)
    assert fragment_shard(plain, "sharded", (100, 3)) == (8, 3)
    assert fragment_shard(plain, "sharded", (1, 1, 1)) is None  # one chunk: nothing to gather
    assert fragment_shard(plain, "reference", (8, 8, 8)) is None  # 0.9.2's bytes
    assert fragment_shard(CellCodec.for_writing(None, (2, 2, 2)), "sharded", (8, 8, 8)) is None  # the caller's shards


@pytest.mark.parametrize("shard_shape", [None, 2])
def test_object_writes_shard_fragments_only(tmp_path, shard_shape):
    import json

    rng = np.random.default_rng(3)
    pos = rng.uniform(0, 100, (400, 3)).astype(np.float32)
    faces = rng.integers(0, 400, (300, 3))
    zvf.write_mesh(str(tmp_path / "m"), pos, faces, chunk_shape=(20.0,) * 3, shard_shape=shard_shape)

    def codec(name):
        return json.loads((tmp_path / "m" / "0" / name / "zarr.json").read_text())["codecs"][0]

    frag, vert = codec("vertex_fragments"), codec("vertices")
    assert frag["name"] == "sharding_indexed"
    want = [4, 4, 4] if shard_shape is None else [2, 2, 2]
    assert json.loads((tmp_path / "m" / "0" / "vertex_fragments" / "zarr.json").read_text())[
        "chunk_grid"]["configuration"]["chunk_shape"] == want
    assert (vert["name"] == "sharding_indexed") == (shard_shape is not None)
    got = zvf.open(str(tmp_path / "m")).read_objects([0], combined=True)
    assert len(got.positions) == 400 and len(got.faces) == 300


async def test_fragment_cells_handed_to_the_commit_round_trip_and_damage_is_named():
    """Distributed cell tasks hand their buffered fragment cells to the commit through a job summary."""
    from zvf.errors import FormatError
    from zvf.format.codecs import CellCodec
    from zvf.write.store_writer import SpatialArrayOut

    def out():
        return SpatialArrayOut("0/vertex_fragments", CellCodec.for_writing(None, (2, 2)), (0, 0), (4, 4), {})

    task = out()
    for chunk, blob in (((0, 0), b"abc"), ((3, 1), b""), ((1, 2), b"defg")):
        await task.put(None, chunk, blob)  # sharded: buffered, no writer needed
    taken = task.take_buffered()
    assert not task._shards and taken["lengths"].tolist() == [3, 0, 4]
    commit = out()
    commit.adopt(taken, "job/cells/000000.npz")
    assert commit._shards == {(0, 0): {0: b"abc"}, (1, 0): {3: b""}, (0, 1): {2: b"defg"}}
    with pytest.raises(FormatError, match=r"job/cells/000001\.npz"):
        out().adopt({**taken, "lengths": taken["lengths"] + 1}, "job/cells/000001.npz")
