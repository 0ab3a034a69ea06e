"""Bulk export: iter_chunks / iter_objects with bounded prefetch, and `zvf export` to npz/csv/parquet."""

from __future__ import annotations

import csv
import importlib.util

import anyio
import numpy as np
import pytest

import zvf
from zvf.cli.main import main
from zvf.errors import InvalidArgumentError
from zvf.read import export as export_mod


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
    real = export_mod.read_chunks

    async def fetch(*args, **kwargs):
        state["started"] += 1
        await anyio.sleep(state["delay"])
        return await real(*args, **kwargs)

    monkeypatch.setattr(export_mod, "read_chunks", fetch)
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
    real = export_mod.read_chunks

    async def failing(ds_, lvl, chunks, names, box=None):
        if counted["started"] >= 3:
            raise InvalidArgumentError("boom at batch 3")
        return await real(ds_, lvl, chunks, names, box)

    monkeypatch.setattr(export_mod, "read_chunks", failing)
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
    assert "100.0%" in captured.err  # the progress bar
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
    real = export_mod.read_chunks

    async def failing(ds_, lvl, chunks, names, box=None):
        if len(chunks) and counted["started"] >= 4:
            raise InvalidArgumentError("boom")
        return await real(ds_, lvl, chunks, names, box)

    monkeypatch.setattr(export_mod, "read_chunks", failing)
    out = tmp_path / "x.csv"
    with pytest.raises(InvalidArgumentError):
        await export_mod.export(ds, str(out), batch_chunks=2)
    assert not out.exists()


@pytest.mark.s3
async def test_export_from_s3(s3_target, tmp_path):
    url, opts = s3_target
    pos = np.random.default_rng(1).uniform(0, 50, (5000, 2)).astype(np.float32)
    await zvf.aio.write_points(url, pos, chunk_shape=(10, 10), storage_options=opts)
    ds = await zvf.aio.open(url, storage_options=opts)
    summary = await export_mod.export(ds, str(tmp_path / "s3.npz"), batch_chunks=4)
    assert summary["vertices"] == 5000 and summary["chunks"] == 25 and summary["bytes"] > 5000 * 8
    assert np.load(tmp_path / "s3.npz")["positions"].shape == (5000, 2)
