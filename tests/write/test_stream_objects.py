"""Streaming object writers: batches write the in-memory writer's bytes, file for file.

Every geometry, uneven splits with empty batches, 2-D and 3-D, none/zstd,
sharded, vertex/object/group/link/fragment attributes, cross-chunk links,
sync and async iterables, and tiny spill buffers (many runs per chunk).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import zvf
from tests.support.fragments import fragment_counts
from tests.support.object_batches import OPTS, graph_batches, kw_of
from tests.support.store_tree import assert_same_files, store_files
from zvf.config import tuned
from zvf.errors import InvalidArgumentError
from zvf.write.objects.stream import (
    is_object_stream,
    write_connected_stream,
    write_paths_stream,
)

SPLITS = {"one": [], "uneven": [0, 1, 1, 7], "many": [2, 3, 5, 8, 13, 13, 21]}  # cut points (objects/vertices)


def cut(n: int, points: list[int]) -> list[tuple[int, int]]:
    pts = [0] + [min(p, n) for p in points] + [n]
    return list(itertools.pairwise(pts))


def walks(rng, n_obj: int, ndim: int, lo=-40.0, hi=90.0) -> list[np.ndarray]:
    out = []
    for _ in range(n_obj):
        k = int(rng.integers(0, 25))
        out.append(np.clip(rng.uniform(lo + 10, hi - 10, ndim) + np.cumsum(rng.normal(0, 8, (k, ndim)), 0), lo, hi)
                   .astype(np.float32))
    return out


@pytest.mark.parametrize("opt", OPTS, ids=["3d-raw", "2d-zstd-sharded", "3d-zstd-sharded"])
@pytest.mark.parametrize("split", list(SPLITS))
def test_polylines(tmp_path, opt, split):
    rng = np.random.default_rng(len(split) + opt["ndim"])
    pl = walks(rng, 30, opt["ndim"])
    fa = [rng.random(len(p)).astype(np.float32) for p in pl]
    rgb = [rng.integers(0, 255, (len(p), 3)).astype(np.uint8) for p in pl]
    oa = {"n": np.array([len(p) for p in pl], np.int32), "xy": rng.random((30, 2))}
    kw = dict(kw_of(opt), geometry_type="streamline", groups={0: [1, 4], 3: [29]},
              group_attributes={"g": np.arange(4.0)})
    zvf.write_polylines(tmp_path / "mem" / "s", pl, attributes={"fa": fa, "rgb": rgb}, object_attributes=oa, **kw)
    counts = fragment_counts(tmp_path / "mem" / "s")
    frag = {"w": {c: np.arange(k, dtype=np.float32) for c, k in counts.items()}}
    zvf.write_polylines(tmp_path / "mem2" / "s", pl, attributes={"fa": fa, "rgb": rgb}, object_attributes=oa,
                        fragment_attributes=frag, overwrite=False, **kw)
    batches = [{"polylines": pl[a:b], "attributes": {"fa": fa[a:b], "rgb": rgb[a:b]},
                "object_attributes": {k: v[a:b] for k, v in oa.items()}} for a, b in cut(30, SPLITS[split])]
    s1 = zvf.write_polylines(tmp_path / "st" / "s", iter(batches), **kw)
    assert_same_files(tmp_path / "mem" / "s", tmp_path / "st" / "s")
    s2 = zvf.write_polylines(tmp_path / "st2" / "s", iter(batches), fragment_attributes=frag, **kw)
    assert_same_files(tmp_path / "mem2" / "s", tmp_path / "st2" / "s")
    assert s1.vertex_count == s2.vertex_count == sum(len(p) for p in pl) and s1.object_count == 30


async def test_polylines_async_tiny_spill_and_object_attributes_argument(tmp_path):
    rng = np.random.default_rng(7)
    pl = walks(rng, 40, 3)
    oa = {"k": np.arange(40, dtype=np.int64)}
    kw = {"chunk_shape": (20.0, 20.0, 20.0), "bounds": ([-50.0] * 3, [100.0] * 3)}
    await zvf.aio.write_polylines(tmp_path / "mem" / "s", pl, object_attributes=oa, **kw)

    async def gen():
        for a, b in cut(40, [3, 3, 17, 39]):
            yield pl[a:b]

    summary = await write_paths_stream(tmp_path / "st" / "s", gen(), geometry="polyline", object_attributes=oa,
                                       spill_bytes=300, **kw)  # a run every few polylines
    assert_same_files(tmp_path / "mem" / "s", tmp_path / "st" / "s")
    assert summary.cross_chunk_link_count > 0


@pytest.mark.parametrize("opt", OPTS, ids=["3d-raw", "2d-zstd-sharded", "3d-zstd-sharded"])
@pytest.mark.parametrize("every", [1, 5])
def test_bridges_placed_in_rounds_give_the_same_cells(tmp_path, opt, every):
    """The bridge links a streamed paths write queues per chunk are placed a few chunks' worth at a time
    (``LinkWriter.add_deferred``): rounds of any size, cut wherever, write the in-memory bytes."""
    pl = walks(np.random.default_rng(11), 60, opt["ndim"])
    kw = dict(kw_of(opt), geometry_type="streamline")
    with tuned(deferred_link_records=every):
        zvf.write_polylines(tmp_path / "mem" / "s", pl, **kw)
        summary = zvf.write_polylines(tmp_path / "st" / "s", iter([pl[:25], pl[25:]]), **kw)
    assert summary.cross_chunk_link_count > every
    assert_same_files(tmp_path / "mem" / "s", tmp_path / "st" / "s")


@pytest.mark.parametrize("opt", OPTS[:2], ids=["3d-raw", "2d-zstd-sharded"])
def test_lines(tmp_path, opt):
    rng = np.random.default_rng(3)
    m, d = 50, opt["ndim"]
    a = rng.uniform(-30, 90, (m, d))
    ep = np.stack([a, np.clip(a + rng.normal(0, 20, (m, d)), -30, 90)], 1).astype(np.float32)
    t = rng.random((m, 2)).astype(np.float32)
    zvf.write_lines(tmp_path / "mem" / "s", ep, attributes={"t": t}, object_attributes={"o": np.arange(m)},
                    **kw_of(opt))
    batches = [{"endpoints": ep[x:y], "attributes": {"t": t[x:y]}, "object_attributes": {"o": np.arange(x, y)}}
               for x, y in cut(m, [0, 9, 9, 31])]
    zvf.write_lines(tmp_path / "st" / "s", batches, **kw_of(opt))
    assert_same_files(tmp_path / "mem" / "s", tmp_path / "st" / "s")
    zvf.write_lines(tmp_path / "mem2" / "s", ep, **kw_of(opt))
    # a list of (m, 2, ndim) arrays
    zvf.write_lines(tmp_path / "st2" / "s", [ep[:20], ep[20:20], ep[20:]], **kw_of(opt))
    assert_same_files(tmp_path / "mem2" / "s", tmp_path / "st2" / "s")


@pytest.mark.parametrize("geometry", ["graph", "skeleton", "mesh"])
@pytest.mark.parametrize("opt", OPTS, ids=["3d-raw", "2d-zstd-sharded", "3d-zstd-sharded"])
def test_graphs_skeletons_meshes(tmp_path, geometry, opt):
    rng = np.random.default_rng(11)
    batches, cat = graph_batches(rng, [40, 0, 1, 33, 60], opt["ndim"], skeleton=geometry == "skeleton",
                                 mesh=geometry == "mesh")
    uniq = np.unique(cat["oid"])
    kw = dict(kw_of(opt), object_attributes={"s": np.arange(len(uniq), dtype=np.float32)},
              groups=[uniq[:2].tolist(), uniq[-1:].tolist()])
    if geometry == "mesh":
        mem = zvf.write_mesh(tmp_path / "mem" / "s", cat["pos"], cat["rec"], object_ids=cat["oid"],
                             attributes={"a": cat["a"]}, **kw)
        st = zvf.write_mesh(tmp_path / "st" / "s", iter(batches), **kw)
    else:
        mem = zvf.write_graph(tmp_path / "mem" / "s", cat["pos"], cat["rec"], geometry_type=geometry,
                              object_ids=cat["oid"], attributes={"a": cat["a"]}, link_attributes={"la": cat["la"]},
                              **kw)
        st = zvf.write_graph(tmp_path / "st" / "s", batches, geometry_type=geometry, **kw)
    assert_same_files(tmp_path / "mem" / "s", tmp_path / "st" / "s")
    for k in ("object_count", "vertex_count", "link_count", "stored_link_count", "fragment_count", "chunk_count"):
        assert getattr(mem, k) == getattr(st, k), k
    assert any(k.startswith("0/links/0/") and "0.0" not in k.split("/")[3] for k in store_files(tmp_path / "st" / "s"))


async def test_graph_without_ids_tiny_spill_async(tmp_path):
    rng = np.random.default_rng(4)
    batches, cat = graph_batches(rng, [30, 25, 45], 3)
    for b in batches:
        del b["object_ids"], b["link_attributes"]
    await zvf.aio.write_graph(tmp_path / "mem" / "s", cat["pos"], cat["rec"], attributes={"a": cat["a"]},
                              chunk_shape=(30.0,) * 3)

    async def gen():
        for b in batches:
            yield b

    await write_connected_stream(tmp_path / "st" / "s", gen(), geometry="graph", chunk_shape=(30.0,) * 3,
                                 spill_bytes=500)
    assert_same_files(tmp_path / "mem" / "s", tmp_path / "st" / "s")


def test_streamed_store_reads_back(tmp_path):
    rng = np.random.default_rng(9)
    pl = walks(rng, 12, 3)
    zvf.write_polylines(tmp_path / "s" / "s", iter([pl[:5], [], pl[5:]]), chunk_shape=(25.0,) * 3)
    with zvf.open(str(tmp_path / "s" / "s")) as ds:
        for i in (0, 6, 11):
            assert np.array_equal(ds.read_object(i).positions, pl[i])


def test_is_object_stream():
    p = np.zeros((3, 3))
    assert not is_object_stream([p, p], "polylines") and not is_object_stream(np.zeros((2, 2, 3)), "lines")
    assert is_object_stream([[p], [p]], "polylines") and is_object_stream(iter([p]), "polylines")
    assert is_object_stream([np.zeros((2, 2, 3))], "lines") and is_object_stream([{"positions": p}], "graph")
    assert not is_object_stream([[0.0, 1.0, 2.0]], "polylines")


@pytest.mark.parametrize("call, match", [
    (lambda t: zvf.write_polylines(t, iter([[np.zeros((2, 3))]]), chunk_shape="auto"), "'auto' needs the whole"),
    (lambda t: zvf.write_polylines(t, iter([[np.zeros((2, 3))]]), chunk_shape=(1, 1, 1), attributes={"a": [1]}),
     "pass attributes inside each batch"),
    (lambda t: zvf.write_polylines(t, iter([[np.zeros((2, 3))], [np.zeros((2, 2))]]), chunk_shape=(1, 1, 1)),
     r"batches\[1\]: vertices are 2-D"),
    (lambda t: zvf.write_polylines(t, iter([{"polylines": [np.zeros((2, 3))], "attributes": {"a": [np.zeros(2)]}},
                                            {"polylines": [np.zeros((1, 3))],
                                             "attributes": {"a": [np.zeros(1, int)]}}]),
                                   chunk_shape=(1, 1, 1)), r"batches\[1\]\['attributes'\] \{a: int64\} differ"),
    (lambda t: zvf.write_polylines(t, iter([{"lines": []}]), chunk_shape=(1, 1, 1)), r"batches\[0\] must be a dict"),
    (lambda t: zvf.write_polylines(t, iter([[]]), chunk_shape=(1, 1, 1)), "polylines is empty"),
    (lambda t: zvf.write_graph(t, iter([{"positions": np.zeros((2, 3)), "edges": [[0, 2]]}]), chunk_shape=(1, 1, 1)),
     r"batches\[0\]: edges\[0\] = \[0, 2\] indexes outside"),
    (lambda t: zvf.write_graph(t, iter([{"positions": np.zeros((2, 3)), "object_ids": [0, 1]},
                                        {"positions": np.zeros((2, 3))}]), chunk_shape=(1, 1, 1)),
     r"batches\[1\]: either every batch has 'object_ids'"),
    (lambda t: zvf.write_graph(t, iter([{"positions": np.zeros((2, 3)), "edges": [[1, 0]], "object_ids": [4, 4]},
                                        {"positions": np.ones((1, 3)), "object_ids": [4]}]),
                               geometry_type="skeleton", chunk_shape=(1, 1, 1)), "object 4 holds more than one tree"),
    (lambda t: zvf.write_mesh(t, iter([{"vertices": np.zeros((4, 3)), "faces": [[0, 1, 2]]},
                                       {"vertices": np.zeros((4, 3)), "faces": [[0, 1, 2, 3]]}]),
                              chunk_shape=(1, 1, 1)),
     r"batches\[1\]: faces have 4 vertices"),
    (lambda t: zvf.write_graph(t, np.zeros((2, 3)), chunk_shape=(1, 1, 1)), "edges are required"),
    (lambda t: zvf.write_polylines(t, iter([[np.full((1, 3), 5.0)]]), chunk_shape=(1, 1, 1),
                                   bounds=([0, 0, 0], [1, 1, 1])), r"batches\[0\]: positions: 1 rows lie outside"),
])
def test_bad_batches_are_named(tmp_path, call, match):
    with pytest.raises(InvalidArgumentError, match=match):
        call(tmp_path / "s" / "s")
    assert not (tmp_path / "s" / "s" / "zarr.json").exists()
