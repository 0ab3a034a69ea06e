"""Bulk reads and export: iter_chunks / iter_objects with bounded prefetch, and `zvf export` to npz/csv/parquet."""

from __future__ import annotations

import csv
import importlib.util
import os
import re
import threading
import time

import anyio
import numpy as np
import pytest

import zvf
from zvf.cli.main import main
from zvf.config import DEFAULTS, tuned
from zvf.errors import InvalidArgumentError
from zvf.read import bulk
from zvf.read import export as export_mod
from zvf.read.batches import BatchStream
from zvf.read.sweep import ObjectSweep
from zvf.read.writers import companion


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("export") / "pts.zarrvectors"
    rng = np.random.default_rng(7)
    n = 20_000
    pos = rng.uniform(0, 100, (n, 3)).astype(np.float32)
    attrs = {"w": rng.random(n).astype(np.float32), "rgb": rng.integers(0, 9, (n, 3)).astype(np.uint8)}
    zvf.write_points(path, pos, chunk_shape=(20, 20, 20), object_ids=rng.integers(0, 400, n), attributes=attrs,
                     compression="zstd")
    return str(path)


@pytest.fixture
def counted(monkeypatch):
    """Counts batch fetches started by iter_chunks (and lets a test slow them down)."""
    state = {"started": 0, "delay": 0.0}
    real = bulk.read_chunks

    async def fetch(*args, **kwargs):
        state["started"] += 1
        await anyio.sleep(state["delay"])
        return await real(*args, **kwargs)

    monkeypatch.setattr(bulk, "read_chunks", fetch)
    return state


async def test_iter_chunks_is_read_all_in_batches(store):
    ds = await zvf.aio.open(store)
    whole = await ds.read_all()
    parts = [sel async for sel in ds.iter_chunks(batch_chunks=7)]
    assert len(parts) == -(-len((await ds.level(0)).nonempty_chunks) // 7)
    assert np.array_equal(np.concatenate([p.positions for p in parts]), whole.positions)
    assert np.array_equal(np.concatenate([p.object_ids for p in parts]), whole.object_ids)
    for name in ("w", "rgb"):
        assert np.array_equal(np.concatenate([p.attributes[name] for p in parts]), whole.attributes[name])
    only_w = [sel async for sel in ds.iter_chunks(attributes=["w"], batch_chunks=50)]
    assert all(list(s.attributes) == ["w"] for s in only_w)


async def test_prefetch_is_bounded_and_early_exit_stops_fetching(store, counted):
    ds = await zvf.aio.open(store)
    seen = 0
    async with ds.iter_chunks(prefetch=3, batch_chunks=2) as batches:
        async for _ in batches:
            seen += 1
            await anyio.sleep(0.02)  # a slow consumer: the producer must wait for it
            assert counted["started"] - seen <= 3
            if seen == 5:
                break
    started = counted["started"]
    await anyio.sleep(0.05)
    assert counted["started"] == started <= 5 + 3


async def test_plain_async_for_can_break(store):
    ds = await zvf.aio.open(store)
    async for sel in ds.iter_chunks(batch_chunks=1):
        assert len(sel)
        break
    total = 0
    async for sel in ds.iter_chunks():  # a new stream works after an abandoned one
        total += len(sel)
    assert total == (await ds.info())["vertex_count"]


async def test_fetch_error_reaches_the_consumer(store, counted, monkeypatch):
    ds = await zvf.aio.open(store)
    real = bulk.read_chunks

    async def failing(ds_, lvl, chunks, names, box=None, sweep=False):
        if counted["started"] >= 3:
            raise InvalidArgumentError("boom at batch 3")
        return await real(ds_, lvl, chunks, names, box, sweep)

    monkeypatch.setattr(bulk, "read_chunks", failing)
    got = 0
    with pytest.raises(InvalidArgumentError, match="boom"):
        async for _ in ds.iter_chunks(batch_chunks=1):
            got += 1
    assert got >= 2


def test_sync_facade_iterators(store):
    with zvf.open(store) as ds:
        assert sum(len(s) for s in ds.iter_chunks(batch_chunks=9)) == ds.info()["vertex_count"]
        for i, _ in enumerate(ds.iter_chunks(batch_chunks=1)):  # breaking closes the async stream
            if i == 2:
                break
        if hasattr(ds, "read_objects"):
            ids = ds.object_ids()[:40]
            objs = list(ds.iter_objects(ids, batch=16))
            assert [int(o.object_ids[0]) for o in objs] == ids.tolist()


@pytest.mark.skipif(not hasattr(zvf.aio.AsyncDataset, "read_objects"), reason="object reads not in this tree")
async def test_iter_objects_matches_read_object(store):
    ds = await zvf.aio.open(store)
    ids = await ds.object_ids()
    objs = [sel async for sel in ds.iter_objects(batch=64, prefetch=2)]
    assert len(objs) == len(ids) and sum(len(o) for o in objs) == (await ds.info())["vertex_count"]
    for k in (0, 57, len(ids) - 1):
        one = await ds.read_object(int(ids[k]))
        assert np.array_equal(objs[k].positions, one.positions) and set(objs[k].object_ids) == {ids[k]}
    picked = [sel async for sel in ds.iter_objects(ids[[5, 2, 5]], batch=2)]
    assert [int(s.object_ids[0]) for s in picked] == ids[[5, 2, 5]].tolist()


def test_cli_export_npz_and_csv(store, tmp_path, capsys):
    with zvf.open(store) as ds:
        whole = ds.read_all()
    out = tmp_path / "all.npz"
    assert main(["export", store, str(out), "--batch-chunks", "5"]) == 0
    captured = capsys.readouterr()
    assert f"exported {len(whole):,} vertices from " in captured.out and "MB/s" in captured.out
    assert captured.err == ""  # no progress bar when stderr is not a terminal (tests/cli/test_manners.py)
    data = np.load(out)
    assert np.array_equal(data["positions"], whole.positions)
    assert np.array_equal(data["attr_rgb"], whole.attributes["rgb"])
    assert np.array_equal(data["object_ids"], whole.object_ids)

    out = tmp_path / "all.csv"
    assert main(["export", store, str(out), "-q"]) == 0
    assert capsys.readouterr().err == ""
    with open(out) as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["x", "y", "z", "object_id", "rgb_0", "rgb_1", "rgb_2", "w"]
    table = np.asarray(rows[1:], dtype=np.float64)
    assert len(table) == len(whole)
    assert np.array_equal(table[:, :3].astype(np.float32), whole.positions)  # %.9g round-trips float32
    assert np.array_equal(table[:, 3].astype(np.int64), whole.object_ids)
    assert np.array_equal(table[:, 7].astype(np.float32), whole.attributes["w"])


def test_cli_export_parquet_or_clear_error(store, tmp_path, capsys):
    out = tmp_path / "all.parquet"
    if importlib.util.find_spec("pyarrow") is None:
        assert main(["export", store, str(out)]) == 2
        assert "pyarrow" in capsys.readouterr().err and not out.exists()
        return
    import pyarrow.parquet as pq

    assert main(["export", store, str(out), "-q"]) == 0
    with zvf.open(store) as ds:
        whole = ds.read_all()
    table = pq.read_table(out)
    assert table.num_rows == len(whole)
    assert np.array_equal(table["y"].to_numpy(), whole.positions[:, 1])
    assert np.array_equal(table["rgb_2"].to_numpy(), whole.attributes["rgb"][:, 2])


def test_cli_export_errors(store, tmp_path, capsys):
    assert main(["export", store, str(tmp_path / "x.txt")]) == 2
    assert "format" in capsys.readouterr().err
    assert main(["export", store, str(tmp_path / "x.dat"), "--format", "csv", "-q"]) == 0


async def test_failed_export_removes_the_partial_file(store, tmp_path, counted, monkeypatch):
    ds = await zvf.aio.open(store)
    real = bulk.read_chunks

    async def failing(ds_, lvl, chunks, names, box=None, sweep=False):
        if len(chunks) and counted["started"] >= 4:
            raise InvalidArgumentError("boom")
        return await real(ds_, lvl, chunks, names, box, sweep)

    monkeypatch.setattr(bulk, "read_chunks", failing)
    out = tmp_path / "x.csv"
    with pytest.raises(InvalidArgumentError):
        await export_mod.export(ds, str(out), batch_chunks=2)
    assert not out.exists()


class _SlowOrFailingWriter:
    """A file writer that takes ``delay`` s per batch and raises on batch ``fail_at``; counts its writes."""

    def __init__(self, real, delay: float = 0.0, fail_at: int = -1):
        self.real, self.delay, self.fail_at, self.writes = real, delay, fail_at, 0

    def write(self, sel):
        if self.writes == self.fail_at:
            raise OSError(28, "No space left on device")
        time.sleep(self.delay)
        self.real.write(sel)
        self.writes += 1

    def __getattr__(self, name):
        return getattr(self.real, name)


def _wrap_writer(monkeypatch, **kw) -> list:
    made = []
    real = export_mod.open_writer

    def opening(*args):
        made.append(_SlowOrFailingWriter(real(*args), **kw))
        return made[-1]

    monkeypatch.setattr(export_mod, "open_writer", opening)
    return made


def _writer_left() -> bool:
    """Whether a file writer thread still runs (one that has just reported its end gets a moment to return)."""
    for t in threading.enumerate():
        if t.name == "zvf-file-writer":
            t.join(5)
    return any(t.name == "zvf-file-writer" for t in threading.enumerate())


@pytest.mark.parametrize("ahead", [1, None])  # 1 byte: the feeder waits for room before every batch
async def test_a_failed_file_write_fails_the_export(store, tmp_path, monkeypatch, ahead):
    made = _wrap_writer(monkeypatch, fail_at=3)
    ds = await zvf.aio.open(store)
    ahead_bytes = ahead or DEFAULTS.export_write_ahead_bytes
    with tuned(export_write_ahead_bytes=ahead_bytes), anyio.fail_after(60), pytest.raises(OSError, match="No space"):
        await export_mod.export(ds, str(tmp_path / "x.npz"), batch_chunks=2)
    assert made[0].writes == 3 and list(tmp_path.iterdir()) == []
    assert not _writer_left()


async def test_a_cancelled_export_stops_its_writer(store, tmp_path, monkeypatch):
    made = _wrap_writer(monkeypatch, delay=0.05)
    ds = await zvf.aio.open(store)
    scope = anyio.CancelScope()

    async def run() -> None:
        with scope, tuned(export_write_ahead_bytes=1):
            await export_mod.export(ds, str(tmp_path / "x.csv"), batch_chunks=1)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        with anyio.fail_after(60):
            while not made or made[0].writes < 2:  # cancelled with the writer under way
                await anyio.sleep(0.01)
        scope.cancel()
    assert scope.cancelled_caught and list(tmp_path.iterdir()) == []
    assert not _writer_left()
    writes = made[0].writes
    await anyio.sleep(0.2)
    assert writes == made[0].writes < 125  # no write after the export returned; most batches never written


async def test_a_progress_error_fails_the_export(store, tmp_path):
    ds = await zvf.aio.open(store)

    def progress(summary):
        if summary["done"] > 4:
            raise ValueError("progress sink closed")

    with pytest.raises(ValueError, match="sink closed"):
        await export_mod.export(ds, str(tmp_path / "x.npz"), batch_chunks=2, progress=progress)
    assert list(tmp_path.iterdir()) == [] and not _writer_left()


@pytest.mark.s3
async def test_export_from_s3(s3_target, tmp_path):
    url, opts = s3_target
    pos = np.random.default_rng(1).uniform(0, 50, (5000, 2)).astype(np.float32)
    await zvf.aio.write_points(url, pos, chunk_shape=(10, 10), storage_options=opts)
    ds = await zvf.aio.open(url, storage_options=opts)
    summary = await export_mod.export(ds, str(tmp_path / "s3.npz"), batch_chunks=4)
    assert summary["vertices"] == 5000 and summary["chunks"] == 25 and summary["bytes"] > 5000 * 8
    assert np.load(tmp_path / "s3.npz")["positions"].shape == (5000, 2)


# --------------------------------------------------------------------------
# object geometries: every object rebuilt from the files, in every format
# --------------------------------------------------------------------------

FORMATS = ["npz", "csv"] + (["parquet"] if importlib.util.find_spec("pyarrow") else [])


def _grid_mesh(rng, k: int, origin) -> tuple[np.ndarray, np.ndarray]:
    """A wavy k x k vertex sheet of 2(k-1)^2 triangles (winding kept) at ``origin``."""
    u, v = np.meshgrid(np.arange(k), np.arange(k), indexing="ij")
    verts = np.stack([u.ravel() * 3.0, v.ravel() * 3.0, rng.normal(0, 1, k * k)], axis=1) + origin
    i = (u[:-1, :-1] * k + v[:-1, :-1]).ravel()
    faces = np.concatenate([np.stack([i, i + k, i + 1], 1), np.stack([i + 1, i + k, i + k + 1], 1)])
    return verts.astype(np.float32), faces


@pytest.fixture(scope="module")
def object_stores(tmp_path_factory):
    """A streamline store written by zarr-vectors 0.9.2, a graph with link attributes and a mesh written by zvf."""
    import warnings

    from zarr_vectors import building

    root = tmp_path_factory.mktemp("objects")
    rng = np.random.default_rng(12)
    lines = [np.clip(rng.uniform(10, 90, 3) + np.cumsum(rng.normal(0, 2.5, (n, 3)), axis=0), 0, 100)
             .astype(np.float32) for n in rng.integers(2, 60, 300)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        building.write_polylines(str(root / "sl.zarrvectors"), lines, chunk_shape=(20.0,) * 3,
                                 bounds=([0.0] * 3, [100.0] * 3), geometry_type="streamline",
                                 vertex_attributes={"fa": [rng.random(len(s)).astype(np.float32) for s in lines]})
    walks = [np.clip(rng.uniform(10, 90, 3) + np.cumsum(rng.normal(0, 2, (m, 3)), axis=0), 0, 100)
             for m in rng.integers(10, 120, 40)]  # one object per walk, edges between near vertices
    sizes = np.array([len(w) for w in walks])
    first = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    chain = np.concatenate([np.stack([f + np.arange(1, m), f + np.arange(m - 1)], 1) for f, m in zip(first, sizes)])
    extra = np.concatenate([np.stack([f + np.arange(3, m, 5), f + np.arange(0, m - 3, 5)], 1) for f, m in
                            zip(first, sizes)])
    label = rng.permutation(int(sizes.sum()))  # vertices in no particular order
    pos = np.empty((len(label), 3), np.float32)
    pos[label] = np.concatenate(walks)
    oid = np.empty(len(label), np.int64)
    oid[label] = np.repeat(np.arange(40) * 3 + 1, sizes)
    edges = label[np.concatenate([chain, extra])]
    n = len(pos)
    zvf.write_graph(str(root / "g.zarrvectors"), pos, edges, chunk_shape=(25.0,) * 3, object_ids=oid,
                    attributes={"r": rng.random(n).astype(np.float32),
                                "rgb": rng.integers(0, 255, (n, 3)).astype(np.uint8)},
                    link_attributes={"w": rng.random(len(edges)).astype(np.float32)})
    verts, faces, ids = [], [], []
    base = 0
    for m in range(25):
        v, f = _grid_mesh(rng, int(rng.integers(3, 9)), rng.uniform(0, 75, 3))
        verts.append(v)
        faces.append(f + base)
        ids.append(np.full(len(v), m))
        base += len(v)
    zvf.write_mesh(str(root / "m.zarrvectors"), np.concatenate(verts), np.concatenate(faces),
                   chunk_shape=(15.0,) * 3, object_ids=np.concatenate(ids))
    return {"streamline": str(root / "sl.zarrvectors"), "graph": str(root / "g.zarrvectors"),
            "mesh": str(root / "m.zarrvectors")}


def _load(path, fmt: str, table: str) -> dict[str, np.ndarray]:
    """Flat columns of one exported table, read with numpy / pyarrow only."""
    if fmt == "csv":
        p = companion(path, table) if table != "vertices" else path
        with open(p) as fh:
            header = fh.readline().strip().split(",")
        data = np.loadtxt(p, delimiter=",", skiprows=1, ndmin=2, dtype=np.float64)
        return {n: data[:, i] for i, n in enumerate(header)}
    if fmt == "parquet":
        import pyarrow.parquet as pq

        p = companion(path, table) if table != "vertices" else path
        t = pq.read_table(p)
        return {n: t.column(n).to_numpy() for n in t.column_names}
    z = np.load(path)
    out: dict[str, np.ndarray] = {}
    prefix = "" if table == "vertices" else f"{table}_"
    for key in z.files:
        a = z[key]
        if key == "positions" and table == "vertices":
            out.update(zip("xyz", a.T))
        elif key == ("object_ids" if table == "vertices" else f"{table}_object_ids"):
            out["object_id"] = a
        elif key == "vertex_index" and table == "vertices":
            out[key] = a
        elif key == table:
            out.update((f"v{i}", c) for i, c in enumerate(a.T))
        elif key.startswith(prefix + "attr_") and (table != "vertices" or not key.startswith(("edges", "faces"))):
            name = key[len(prefix) + 5:]
            out.update({name: a} if a.ndim == 1 else {f"{name}_{i}": c for i, c in enumerate(a.T)})
    return out


def _rows(conn: np.ndarray, attrs: dict) -> list[tuple]:
    """Link rows with their attributes, order-free (winding kept)."""
    cols = [conn[:, i].astype(np.float64) for i in range(conn.shape[1])]
    cols += [np.asarray(v, np.float64).reshape(len(conn), -1)[:, j] for _, v in sorted(attrs.items())
             for j in range(np.asarray(v).reshape(len(conn), -1).shape[1])]
    return sorted(zip(*(c.tolist() for c in cols))) if cols else []


def _check_rebuild(store: str, out, fmt: str, table: str | None) -> int:
    """Rebuild every object from the files and compare with read_object; returns objects checked."""
    vt = _load(out, fmt, "vertices")
    order = np.lexsort((vt["vertex_index"], vt["object_id"]))
    vt = {k: v[order] for k, v in vt.items()}
    ids, starts = np.unique(vt["object_id"], return_index=True)
    bounds = dict(zip(ids.tolist(), zip(starts.tolist(), [*starts[1:].tolist(), len(order)])))
    lt = _load(out, fmt, table) if table else None
    with zvf.open(store) as ds:
        all_ids = ds.object_ids()
        assert set(ids.tolist()) <= set(all_ids.tolist())
        for oid in all_ids.tolist():
            one = ds.read_object(oid)
            a, b = bounds.get(oid, (0, 0))
            assert b - a == len(one), oid
            assert np.array_equal(vt["vertex_index"][a:b], np.arange(len(one)))
            got = np.stack([vt[c][a:b] for c in "xyz"], 1).astype(np.float32)
            assert np.array_equal(got, one.positions), oid
            for name, v in one.attributes.items():
                flat = v.reshape(len(v), -1)
                cols = [name] if v.ndim == 1 else [f"{name}_{i}" for i in range(flat.shape[1])]
                got = np.stack([vt[c][a:b] for c in cols], 1).astype(v.dtype)
                assert np.array_equal(got, flat), (oid, name)
            if table is None:
                continue
            conn = getattr(one, table)
            mine = lt["object_id"] == oid
            width = conn.shape[1]
            got = np.stack([lt[f"v{i}"][mine] for i in range(width)], 1).astype(np.int64)
            attrs = {k: lt[k][mine].astype(one.link_attributes[k].dtype) for k in lt
                     if k != "object_id" and not re.fullmatch(r"v\d+", k)}
            assert _rows(got, attrs) == _rows(conn, one.link_attributes), oid
    return len(all_ids)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("geometry,table", [("streamline", None), ("graph", "edges"), ("mesh", "faces")])
async def test_export_rebuilds_every_object(object_stores, tmp_path, geometry, table, fmt):
    store = object_stores[geometry]
    out = tmp_path / f"out.{fmt}"
    ds = await zvf.aio.open(store)
    s = await export_mod.export(ds, str(out), batch_objects=7, prefetch=2)
    assert s["unit"] == "objects" and s["done"] == s["total"] == len(await ds.object_ids())
    expected = [str(out)] + ([companion(str(out), table)] if table and fmt != "npz" else [])
    assert s["files"] == expected and all(os.path.exists(p) for p in expected)
    if table is None and fmt != "npz":
        assert not (tmp_path / f"out.edges.{fmt}").exists()
    assert await anyio.to_thread.run_sync(_check_rebuild, store, out, fmt, table) == s["total"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.rsplit("/", 1)[1] for p in expected)  # no leftovers


@pytest.mark.parametrize("geometry,table", [("streamline", None), ("graph", "edges"), ("mesh", "faces")])
async def test_windowed_object_export_rebuilds_every_object(object_stores, tmp_path, monkeypatch, geometry, table):
    """A level larger than the sweep's cache: windows of chunks, ChunkSet restarts, links across windows."""
    store, out = object_stores[geometry], tmp_path / "out.npz"
    ds = await zvf.aio.open(store)
    with tuned(sweep_bytes=1):
        s = await export_mod.export(ds, str(out), batch_chunks=2, batch_objects=5)
    assert s["done"] == s["total"] == len(await ds.object_ids())
    assert await anyio.to_thread.run_sync(_check_rebuild, store, out, "npz", table) == s["total"]


def test_query_out_carries_order_and_links(object_stores, tmp_path, capsys):
    fmt = FORMATS[-1]
    out = tmp_path / f"q.{fmt}"
    assert main(["query", object_stores["graph"], "--objects", "4,7", "--out", str(out)]) == 0
    assert f"q.edges.{fmt}" in capsys.readouterr().out
    vt, et = _load(out, fmt, "vertices"), _load(out, fmt, "edges")
    with zvf.open(object_stores["graph"]) as ds:
        for oid in (4, 7):
            one = ds.read_object(oid)
            mine = vt["object_id"] == oid
            assert np.array_equal(np.sort(vt["vertex_index"][mine]), np.arange(len(one)))
            assert (et["object_id"] == oid).sum() == len(one.edges)
    out = tmp_path / "clip.csv"
    assert main(["query", object_stores["streamline"], "--bbox", "20,20,20", "60,60,60", "--clip",
                 "--out", str(out)]) == 0
    assert (tmp_path / "clip.edges.csv").exists() and "vertex_index" in _load(out, "csv", "vertices")


# --------------------------------------------------------------------------
# object export: one sweep over the chunks, each cell read about once
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def crossing_store(tmp_path_factory):
    """Long walks over a 10x10x10 chunk grid: most objects cross several chunks."""
    rng = np.random.default_rng(3)
    lines = [np.clip(rng.uniform(5, 95, 3) + np.cumsum(rng.normal(0, 4, (n, 3)), axis=0), 0, 99.9)
             .astype(np.float32) for n in rng.integers(20, 80, 200)]
    path = tmp_path_factory.mktemp("crossing") / "walks.zarrvectors"
    zvf.write_polylines(str(path), lines, chunk_shape=(10.0,) * 3, bounds=([0.0] * 3, [100.0] * 3),
                        geometry_type="streamline")
    return str(path), lines


async def _requests(store: str, run) -> int:
    ds = await zvf.aio.open(store)
    before = ds.stats.snapshot()["requests"]
    await run(ds)
    return ds.stats.snapshot()["requests"] - before


async def test_object_export_reads_each_cell_about_once(crossing_store, tmp_path):
    store, lines = crossing_store

    async def chunks(ds):
        async for _ in ds.iter_chunks():
            pass

    async def sweep(ds, cache_bytes=None):
        sw = ObjectSweep(ds, level=0, attributes=None, window=8, per_batch=50, cache_bytes=cache_bytes)
        n = 0
        async for sel in BatchStream(sw.setup, sw.fetch, prefetch=3, flatten=True):
            assert len(sel.objects) <= 50
            n += len(sel.objects)
        assert n == len(lines)

    async def by_file(ds):
        s = await export_mod.export(ds, str(tmp_path / "w.npz"), batch_chunks=16, batch_objects=50)
        assert s["done"] == s["total"] == len(lines) and s["vertices"] == sum(map(len, lines))

    base = await _requests(store, chunks)
    lvl = await (await zvf.aio.open(store)).level(0)
    crossing = sum(len(np.unique(np.floor(v / 10).astype(int), axis=0)) > 1 for v in lines)
    assert len(lvl.nonempty_chunks) > 200 and crossing > 0.9 * len(lines)
    # every cell fits the default cache: the sweep reads what iter_chunks reads
    assert await _requests(store, sweep) <= base + 2
    assert await _requests(store, by_file) <= base + 2
    # a tiny cache restarts the sweep's ChunkSet often and re-reads live cells, at most twice over
    assert base < await _requests(store, lambda ds: sweep(ds, cache_bytes=1)) <= 2 * base
    data = np.load(tmp_path / "w.npz")
    order = np.lexsort((data["vertex_index"], data["object_ids"]))
    assert np.array_equal(data["positions"][order], np.concatenate(lines))
