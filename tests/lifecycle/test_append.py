"""Appends: k appends read as one write of the concatenated input, 0.9.2 reads the result,
concurrent appenders on S3 lose nothing, a SIGKILLed append leaves the store as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import anyio
import numpy as np
import pytest

import zvf.aio as za
from tests.support.processes import kill_when_paused
from tests.support.store_tree import current_files
from zvf.config import tuned
from zvf.errors import InvalidArgumentError, ReadOnlyError

KW = {"chunk_shape": [5.0, 5.0, 5.0], "bin_shape": [2.5, 2.5, 2.5]}


def _cloud(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(0, 12, (n, 3)).astype(np.float32), rng.random(n)


def _files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


async def _same(a_url, b_url):
    a, b = await za.open(a_url), await za.open(b_url)
    sa, sb = await a.read_all(), await b.read_all()
    assert np.array_equal(sa.positions, sb.positions)
    assert sa.attributes.keys() == sb.attributes.keys()
    for k in sa.attributes:
        assert np.array_equal(sa.attributes[k], sb.attributes[k])
    assert (sa.object_ids is None) == (sb.object_ids is None)
    if sa.object_ids is not None:
        assert np.array_equal(sa.object_ids, sb.object_ids)
    assert np.array_equal(a.bounds[0], b.bounds[0]) and np.array_equal(a.bounds[1], b.bounds[1])
    return a, b


async def test_k_appends_read_as_one_write(tmp_path):
    pos, att = _cloud(900)
    one, app = str(tmp_path / "one"), str(tmp_path / "app")
    await za.write_points(one, pos, attributes={"a": att}, **KW)
    await za.write_points(app, pos[:200], attributes={"a": att[:200]}, **KW)
    ds = await za.open(app, mode="a")
    for lo, hi in ((200, 500), (500, 510), (510, 900)):
        summary = await ds.append_points(pos[lo:hi], attributes={"a": att[lo:hi]})
    # incremental: the last small append rewrote the chunks its points fall in and copied the rest
    assert summary["chunks_copied"] > 0 and summary["vertex_count"] == 900
    assert len(await ds.read_all()) == 900  # the handle sees its own appends
    await _same(one, app)
    _same_cells(tmp_path / "one", tmp_path / "app")
    assert not [f for f in os.listdir(app) if f.startswith(".zvf")]


def _same_cells(one, app):
    """Byte for byte the cells of the single write: those of the appended store's current version (in the
    key families the appends picked; earlier versions' cells are kept beside them for their readers)."""
    mine, theirs = current_files(app), current_files(one)
    cells = sorted(k for k in theirs if not k.endswith("zarr.json"))
    assert sorted(k for k in mine if not k.endswith("zarr.json")) == cells
    for k in cells:
        assert mine[k] == theirs[k], k


async def test_incremental_append_reads_only_touched_chunks(tmp_path):
    """Points landing in one chunk: one chunk's cells are read, the others copied; the grid may grow below
    its origin (every copied cell moves to its new key)."""
    pos, att = _cloud(2000, 4)
    extra = np.array([[0.5, 0.5, 0.5], [0.7, 0.2, 0.1], [-3.0, 1.0, 1.0]], np.float32)
    one, app = tmp_path / "one", tmp_path / "app"
    await za.write_points(str(one), np.concatenate([pos, extra]), attributes={"a": np.r_[att, [1.0, 2.0, 3.0]]},
                          **KW)
    await za.write_points(str(app), pos, attributes={"a": att}, **KW)
    ds = await za.open(str(app), mode="a")
    read = []
    transport = ds.context.ex.transport

    def logging(get):
        async def logged(key):
            read.append(key)
            return await get(key)
        return logged

    transport.get, transport.get_view = logging(transport.get), logging(transport.get_view)
    summary = await ds.append_points(extra[:2], attributes={"a": [1.0, 2.0]})
    assert summary["chunks_rewritten"] == 1 and summary["chunks_copied"] == 26  # 27 chunks of 5 in [0, 12]^3
    assert sorted(k for k in read if "/c" in k) == ["0/vertex_attributes/a/c/0/0/0", "0/vertices/c/0/0/0"]
    again = await za.open(str(app))  # the new root's consolidated section names the new documents
    assert len(await again.read_all()) == 2002
    summary = await ds.append_points(extra[2:], attributes={"a": [3.0]})  # below the origin: a new grid origin
    await _same(str(one), str(app))
    mine, theirs = current_files(app), current_files(one)
    for f in theirs:
        if "/c/" in f and "vertex_fragments" not in f:
            assert mine[f] == theirs[f], f  # the cells of the current version, whatever family they went to


async def test_sharded_and_object_geometries_rewrite(tmp_path):
    """Sharded point clouds take the rewriting path; the result still reads as one write."""
    pos, att = _cloud(400, 5)
    one, app = str(tmp_path / "one"), str(tmp_path / "app")
    kw = dict(KW, shard_shape=[2, 2, 2])
    await za.write_points(one, pos, attributes={"a": att}, **kw)
    await za.write_points(app, pos[:300], attributes={"a": att[:300]}, **kw)
    ds = await za.open(app, mode="a")
    summary = await ds.append_points(pos[300:], attributes={"a": att[300:]})
    assert summary["chunks_copied"] == 0 and summary["vertex_count"] == 400
    await _same(one, app)
    _same_cells(tmp_path / "one", tmp_path / "app")


async def test_append_ids_tables_and_growth(tmp_path):
    pos, att = _cloud(600, 1)
    pos[400:] += 20  # the append grows the bounds and the grid
    ids = np.arange(600) // 10
    kw = dict(KW, bin_shape=None)
    one, app = str(tmp_path / "one"), str(tmp_path / "app")
    await za.write_points(one, pos, attributes={"a": att}, object_ids=ids,
                          object_attributes={"w": np.arange(60.0)}, groups={0: [1, 2], 1: [3], 2: [45, 50]}, **kw)
    await za.write_points(app, pos[:400], attributes={"a": att[:400]}, object_ids=ids[:400],
                          object_attributes={"w": np.arange(40.0)}, groups={0: [1, 2], 1: [3]}, **kw)
    ds = await za.open(app, mode="a")
    await ds.append_points(pos[400:], attributes={"a": att[400:]}, object_ids=ids[400:],
                           object_attributes={"w": np.arange(40.0, 60.0)}, groups={0: [45, 50]})
    a, b = await _same(one, app)
    assert np.array_equal(await a.object_attribute("w"), await b.object_attribute("w"))
    assert [g.tolist() for g in await a.groups()] == [g.tolist() for g in await b.groups()]
    assert np.array_equal((await a.read_object(47)).positions, (await b.read_object(47)).positions)
    with pytest.raises(InvalidArgumentError, match="object_ids"):
        await ds.append_points(pos[:3], attributes={"a": att[:3]}, object_ids=[1, 2, 3])
    with pytest.raises(InvalidArgumentError, match="attributes"):
        await ds.append_points(pos[:3], object_ids=[100, 101, 102])


async def test_append_polylines_and_reference_reads(tmp_path):
    rng = np.random.default_rng(2)
    lines = [rng.uniform(0, 10, (int(k), 3)).astype(np.float32) for k in rng.integers(2, 30, 25)]
    w = [rng.random(len(p)) for p in lines]
    one, app = str(tmp_path / "one.zarrvectors"), str(tmp_path / "app.zarrvectors")
    await za.write_polylines(one, lines, attributes={"w": w}, groups={0: [0, 20]}, chunk_shape=[4.0] * 3)
    await za.write_polylines(app, lines[:10], attributes={"w": w[:10]}, groups={0: [0]}, chunk_shape=[4.0] * 3)
    ds = await za.open(app, mode="a")
    await ds.append_polylines(lines[10:], attributes={"w": w[10:]}, groups={0: [10]})
    a, b = await za.open(one), await za.open(app)
    assert np.array_equal(await a.object_ids(), await b.object_ids())
    for i in (0, 9, 10, 24):
        ra, rb = await a.read_object(i), await b.read_object(i)
        assert np.array_equal(ra.positions, rb.positions)
        assert np.array_equal(ra.attributes["w"], rb.attributes["w"])
    assert [g.tolist() for g in await b.groups()] == [[0], [20]]
    zv = pytest.importorskip("zarr_vectors")
    assert np.array_equal(np.asarray(zv.open(app).level(0).objects[24].positions).reshape(-1, 3), lines[24])
    assert not zv.open(app).validate(level=3).errors


@pytest.mark.parametrize("geometry", ["line", "graph", "skeleton", "mesh"])
async def test_object_appends_stream_to_the_bytes_of_one_write(tmp_path, geometry):
    """Lines, graphs, skeletons and meshes rewrite level 0 through the streaming writer (the store's
    objects a few at a time, then the new ones): every cell equals one write of the concatenation."""
    rng = np.random.default_rng(9)
    one, app = tmp_path / "one", tmp_path / "app"
    kw = {"chunk_shape": [4.0] * 3, "compression": "zstd"}
    if geometry == "line":
        ends, w = rng.uniform(0, 10, (30, 2, 3)).astype(np.float32), rng.random((30, 2))
        await za.write_lines(str(one), ends, attributes={"w": w}, object_attributes={"k": np.arange(30.0)}, **kw)
        await za.write_lines(str(app), ends[:20], attributes={"w": w[:20]},
                             object_attributes={"k": np.arange(20.0)}, **kw)
        ds = await za.open(str(app), mode="a")
        with tuned(rewrite_object_batch=3):  # the old objects come in several batches
            await ds.append_lines(ends[20:], attributes={"w": w[20:]},
                                  object_attributes={"k": np.arange(20.0, 30.0)})
    else:
        # 8 objects of 10 vertices, each a chain (a valid skeleton tree); the append brings objects 5..7
        n = 80
        pos = rng.uniform(0, 10, (n, 3)).astype(np.float32)
        oids = np.arange(n) // 10
        a = rng.random(n)
        if geometry == "mesh":
            tri = np.array([[0, 1, 2], [2, 3, 4], [4, 5, 6], [6, 7, 8], [8, 9, 0]])
            links = np.concatenate([tri + 10 * k for k in range(8)])
            write, append, extra = za.write_mesh, "append_mesh", {}
        else:
            child = np.flatnonzero(np.arange(n) % 10)
            links = np.stack([child, child - 1], axis=1)
            write, append, extra = za.write_graph, "append_graph", {"geometry_type": geometry}
        await write(str(one), pos, links, object_ids=oids, attributes={"a": a}, **extra, **kw)
        cut, lcut = 50, len(links) * 5 // 8
        await write(str(app), pos[:cut], links[:lcut], object_ids=oids[:cut], attributes={"a": a[:cut]}, **extra, **kw)
        ds = await za.open(str(app), mode="a")
        with tuned(rewrite_object_batch=3):
            summary = await getattr(ds, append)(pos[cut:], links[lcut:] - cut, object_ids=oids[cut:] - 5,
                                                attributes={"a": a[cut:]})
        assert summary["object_count"] == 8 and summary["chunks_copied"] == 0
    _same_cells(one, app)


@pytest.mark.parametrize("geometry", ["points", "streamline"])
async def test_append_rebuilds_pyramid_levels(tmp_path, geometry):
    """A store with pyramid levels gets them built again from the appended level 0 (same factors, chunk
    scales and link depth, under the append's lock): the store equals one write of the concatenation
    with the same pyramid built on it, cell for cell; ``pyramid="drop"`` leaves level 0 only."""
    rng = np.random.default_rng(11)
    one, app, dropped = tmp_path / "one", tmp_path / "app", tmp_path / "dropped"
    factors, scales = [(2, 1), (2, 2)], [1, 2]
    if geometry == "points":
        pos, att = _cloud(3000, 11)
        full = {"positions": pos, "attributes": {"a": att}}
        parts = [{"positions": pos[:2000], "attributes": {"a": att[:2000]}},
                 {"positions": pos[2000:], "attributes": {"a": att[2000:]}}]
        write, append, factors = za.write_points, "append_points", [(2, 1), (2, 1)]
    else:
        lines = [rng.uniform(0, 12, (int(k), 3)).astype(np.float32) for k in rng.integers(2, 20, 60)]
        full = {"polylines": lines, "geometry_type": "streamline"}
        parts = [{"polylines": lines[:40], "geometry_type": "streamline"}, {"polylines": lines[40:]}]
        write, append = za.write_polylines, "append_polylines"
    first = next(iter(full))
    rest = {k: v for k, v in full.items() if k != first}
    await write(str(one), full[first], **rest, **KW)
    await za.build_pyramid(str(one), factors, chunk_scale_factors=scales, cross_level_depth=-1)
    for target in (app, dropped):
        p0 = parts[0]
        await write(str(target), p0[first], **{k: v for k, v in p0.items() if k != first}, **KW)
        await za.build_pyramid(str(target), factors, chunk_scale_factors=scales, cross_level_depth=-1)
    p1 = parts[1]
    ds = await za.open(str(app), mode="a")
    summary = await getattr(ds, append)(p1[first], **{k: v for k, v in p1.items() if k != first})
    assert summary["pyramid_rebuilt"] == [1, 2]
    assert (await za.open(str(app))).levels == [0, 1, 2]
    _same_cells(one, app)
    ds = await za.open(str(dropped), mode="a")
    summary = await getattr(ds, append)(p1[first], **{k: v for k, v in p1.items() if k != first}, pyramid="drop")
    assert "pyramid_rebuilt" not in summary and (await za.open(str(dropped))).levels == [0]
    with pytest.raises(InvalidArgumentError, match="pyramid must be"):
        await getattr(ds, append)(p1[first], pyramid="keep")


async def test_reference_reads_appended_points(tmp_path):
    zv = pytest.importorskip("zarr_vectors")
    pos, att = _cloud(500, 3)
    app = str(tmp_path / "p.zarrvectors")
    await za.write_points(app, pos[:250], attributes={"a": att[:250]}, **KW)
    ds = await za.open(app, mode="a")
    await ds.append_points(pos[250:], attributes={"a": att[250:]})
    assert any("/c." in f for f in _files(app))  # published under the other key family
    r = zv.open(app).read()
    got = np.asarray(r.positions)
    assert np.array_equal(got[np.lexsort(got.T)], pos[np.lexsort(pos.T)])
    assert not zv.open(app).validate(level=3).errors


async def test_append_needs_mode_a(tmp_path):
    pos, _ = _cloud(20)
    await za.write_points(str(tmp_path / "s"), pos, **KW)
    ds = await za.open(str(tmp_path / "s"))
    with pytest.raises(ReadOnlyError, match="mode='a'"):
        await ds.append_points(pos)


CHILD = textwrap.dedent(
    """
    import asyncio, json, os, sys, time
    import numpy as np
    import zvf.aio as za
    from zvf.io import executor as exmod

    after = int(os.environ.get("PAUSE_AFTER", "-1"))
    at = os.environ.get("PAUSE_AT")  # a key of the target store: pause right before writing it
    ops = []
    put0 = exmod.Executor.put

    async def put(self, key, data, *, mode="overwrite"):
        if (after >= 0 and len(ops) >= after and not key.startswith(".")) or (
                at and key == at and os.environ["TARGET"] in self.handle.url):
            print("PAUSED", key, flush=True)
            time.sleep(120)
        ops.append(key)
        return await put0(self, key, data, mode=mode)

    exmod.Executor.put = put
    exmod.Executor.batch_puts = property(lambda self: False)  # every cell through put: the kill points
    target, opts = os.environ["TARGET"], json.loads(os.environ["OPTS"])
    seed = int(os.environ["SEED"])
    rng = np.random.default_rng(seed)
    pos = rng.uniform(0, 12, (200, 3)).astype(np.float32)

    async def main():
        ds = await za.open(target, mode="a", storage_options=opts)
        go = os.environ.get("GO")
        while go and not os.path.exists(go):
            await asyncio.sleep(0.002)
        await ds.append_points(pos, attributes={"a": np.full(200, float(seed))})
        print("DONE", flush=True)

    asyncio.run(main())
    """
)


def _spawn(tmp_path, target, opts, seed, **env):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    e = dict(os.environ, TARGET=target, OPTS=json.dumps(opts), SEED=str(seed), **{k: str(v) for k, v in env.items()})
    return subprocess.Popen([sys.executable, str(script)], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


async def test_two_processes_append_at_once_on_s3(tmp_path, s3_target):
    url, opts = s3_target
    pos, _ = _cloud(100)
    await za.write_points(url, pos, attributes={"a": np.zeros(100)}, storage_options=opts, **KW)
    go = tmp_path / "go"
    procs = [_spawn(tmp_path, url, opts, seed, GO=go) for seed in (1, 2)]
    await anyio.sleep(1.0)  # both children up and waiting
    go.write_text("")
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and "DONE" in out, err
    ds = await za.open(url, storage_options=opts)
    sel = await ds.read_all()
    assert len(sel) == 500
    assert sorted(np.unique(sel.attributes["a"]).tolist()) == [0.0, 1.0, 2.0]
    for seed in (1, 2):
        mine = np.random.default_rng(seed).uniform(0, 12, (200, 3)).astype(np.float32)
        got = sel.positions[sel.attributes["a"] == seed]
        assert np.array_equal(got[np.lexsort(got.T)], mine[np.lexsort(mine.T)])


@pytest.mark.parametrize("pause", [{"PAUSE_AFTER": 1}, {"PAUSE_AFTER": 6}, {"PAUSE_AT": "zarr.json"}])
async def test_sigkill_during_append_leaves_store_as_before(tmp_path, pause):
    """Killed while writing scratch cells, or in the store once every new cell is up (the root's
    compare-and-swap next; tests/reliability/test_publication.py kills it at every request)."""
    target = str(tmp_path / "s")
    pos, att = _cloud(300)
    await za.write_points(target, pos, attributes={"a": att}, **KW)
    before = await (await za.open(target)).read_all()
    kill_when_paused(_spawn(tmp_path, target, {}, 7, **pause))
    after_kill = await (await za.open(target)).read_all()
    assert np.array_equal(after_kill.positions, before.positions)
    assert np.array_equal(after_kill.attributes["a"], before.attributes["a"])
    # the dead appender's lock is taken over at once (its process is gone); the next append succeeds
    ds = await za.open(target, mode="a")
    await ds.append_points(pos[:10], attributes={"a": att[:10]}, lock_timeout=5)
    assert len(await ds.read_all()) == 310
    assert not [f for f in os.listdir(target) if f.startswith(".zvf")]
