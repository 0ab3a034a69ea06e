"""zvf.dask on a real two-process cluster: ingest and export equal the serial writers, crashes included."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

pytest.importorskip("distributed")
import cloudpickle
import dask.array as da
import dask.bag as db
import pyarrow.parquet as pq

import zvf
import zvf.dask as zd
from tests.support.failing_sources import FailOnce, KillOnce
from tests.support.store_tree import tree
from zvf.errors import InvalidArgumentError
from zvf.read.export import export as serial_export

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers need not import the tests package

CHUNK = (20.0, 20.0, 20.0)


def pieces(n_files: int, rows: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    pos = [rng.uniform(-10, 90, (rows, 3)).astype(np.float32) for _ in range(n_files)]
    ids = [rng.integers(0, 40, rows) for _ in range(n_files)]
    w = [rng.random((rows, 2)).astype(np.float32) for _ in range(n_files)]
    return pos, ids, w


def serial(path, pos, ids=None, w=None, **kw):
    return zvf.write_points(str(path), np.concatenate(pos), chunk_shape=CHUNK,
                            object_ids=None if ids is None else np.concatenate(ids),
                            attributes=None if w is None else {"w": np.concatenate(w)}, **kw)


def test_ingest_of_20_files_is_byte_identical(client, tmp_path):
    pos, ids, w = pieces(20, 800)
    files = []
    for i in range(20):
        f = tmp_path / f"in{i:02d}.npz"
        np.savez(f, positions=pos[i], object_ids=ids[i], attr_w=w[i])
        files.append(str(f))
    kw = dict(shard_shape=2, compression="zstd", bin_shape=(10, 10, 10))
    serial(tmp_path / "serial" / "cloud", pos, ids, w, **kw)
    seen = []
    s = zd.write_points(str(tmp_path / "dask" / "cloud"), files, chunk_shape=CHUNK, rows_per_task=3000,
                        client=client, progress=seen.append, **kw)
    assert tree(tmp_path / "serial" / "cloud") == tree(tmp_path / "dask" / "cloud")
    assert s.vertex_count == 16000 and s.object_count == 40
    assert {p["stage"] for p in seen} == {"route", "cells"} and seen[-1]["done"] == seen[-1]["total"]
    assert zvf.validate(str(tmp_path / "dask" / "cloud")).ok


def test_dask_array_and_bag_sources(client, tmp_path):
    pos, _, w = pieces(4, 500, seed=1)
    serial(tmp_path / "s" / "c", pos)
    arr = da.from_array(np.concatenate(pos), chunks=(700, 3))
    zd.write_points(str(tmp_path / "a" / "c"), arr, chunk_shape=CHUNK, client=client)
    assert tree(tmp_path / "s" / "c") == tree(tmp_path / "a" / "c")

    serial(tmp_path / "s2" / "c", pos, w=w)
    bag = db.from_sequence([{"positions": p, "attributes": {"w": a}} for p, a in zip(pos, w)], npartitions=3)
    zd.write_points(str(tmp_path / "b" / "c"), bag, chunk_shape=CHUNK, client=client)
    assert tree(tmp_path / "s2" / "c") == tree(tmp_path / "b" / "c")


def test_killed_worker_still_gives_the_identical_store(client, tmp_path):
    pos, ids, _ = pieces(6, 600, seed=2)
    serial(tmp_path / "s" / "c", pos, ids)
    sources = [{"positions": p, "object_ids": i} for p, i in zip(pos, ids)]
    sources[3] = KillOnce(str(tmp_path / "killed"), sources[3])
    zd.write_points(str(tmp_path / "d" / "c"), sources, chunk_shape=CHUNK, client=client)
    assert os.path.exists(tmp_path / "killed")
    assert tree(tmp_path / "s" / "c") == tree(tmp_path / "d" / "c")


def test_a_failed_job_resumes(client, tmp_path):
    pos, ids, _ = pieces(5, 400, seed=3)
    serial(tmp_path / "s" / "c", pos, ids)
    sources = [{"positions": p, "object_ids": i} for p, i in zip(pos, ids)]
    sources[4] = FailOnce(str(tmp_path / "failed"), sources[4])
    target = str(tmp_path / "d" / "c")
    with pytest.raises(RuntimeError, match="source unavailable"):
        zd.write_points(target, sources, chunk_shape=CHUNK, job="nightly", client=client)
    assert os.path.isdir(os.path.join(target, ".zvf-jobs", "nightly"))
    with pytest.raises(InvalidArgumentError, match="other arguments"):
        zd.write_points(target, sources, chunk_shape=(10, 10, 10), job="nightly", client=client)
    zd.write_points(target, sources, chunk_shape=CHUNK, job="nightly", client=client)
    assert tree(tmp_path / "s" / "c") == tree(target)


def _serial_table(ds_path, out):
    async def run():
        async with await zvf.aio.open(str(ds_path)) as ds:
            return await serial_export(ds, str(out), batch_chunks=4, batch_objects=7)

    import anyio

    return anyio.run(run)


def _parts(out_dir, table=""):
    import re

    import pyarrow as pa

    names = sorted(f for f in os.listdir(out_dir) if re.fullmatch(rf"part\.\d+{table}\.parquet", f))
    return pa.concat_tables([pq.read_table(os.path.join(out_dir, f)) for f in names])


def test_export_equals_the_serial_export(client, tmp_path):
    pos, ids, w = pieces(3, 700, seed=4)
    serial(tmp_path / "pts", pos, ids, w)
    _serial_table(tmp_path / "pts", tmp_path / "serial.parquet")
    s = zd.export(str(tmp_path / "pts"), tmp_path / "out", batch_chunks=16, client=client)
    assert s["vertices"] == 2100 and s["partitions"] > 1
    assert _parts(tmp_path / "out").equals(pq.read_table(tmp_path / "serial.parquet"))
    df = zd.to_dask(str(tmp_path / "pts"), batch_chunks=16).compute(scheduler=client.get).reset_index(drop=True)
    assert df.equals(pq.read_table(tmp_path / "serial.parquet").to_pandas())
    box = ((0, 0, 0), (30, 30, 30))
    sub = zd.to_dask(str(tmp_path / "pts"), bbox=box, batch_chunks=64).compute(scheduler=client.get)
    allp = np.concatenate(pos)
    assert len(sub) == int(np.all((allp >= 0) & (allp <= 30), axis=1).sum())

    # a graph: vertex table with object_id / vertex_index, and its edges table, partition by partition
    rng = np.random.default_rng(5)
    gpos = rng.uniform(0, 60, (300, 3)).astype(np.float32)
    edges = rng.integers(0, 300, (400, 2))
    zvf.write_graph(str(tmp_path / "g"), gpos, edges, chunk_shape=CHUNK, object_ids=rng.integers(0, 20, 300))
    _serial_table(tmp_path / "g", tmp_path / "g.parquet")
    got = zd.export(str(tmp_path / "g"), tmp_path / "gout", batch_chunks=4, batch_objects=7, client=client)
    assert got["partitions"] > 3
    assert by_object(_parts(tmp_path / "gout")).equals(by_object(pq.read_table(tmp_path / "g.parquet")))
    assert by_object(_parts(tmp_path / "gout", ".edges"), "object_id").equals(
        by_object(pq.read_table(tmp_path / "g.edges.parquet"), "object_id"))
    e = zd.to_dask(str(tmp_path / "g"), table="edges", batch_objects=7).compute(scheduler=client.get)
    assert by_object(e, "object_id").equals(by_object(pq.read_table(tmp_path / "g.edges.parquet"),
                                                             "object_id"))


def by_object(table, column: str = "object_id"):
    """Rows grouped by object, each object's rows in their order: the Dask export's objects come by chunk
    window, the serial one's by id (see zvf.distributed.export)."""
    df = table if hasattr(table, "iloc") else table.to_pandas()
    return df.sort_values(column, kind="stable").reset_index(drop=True)


async def test_object_export_partitions_read_about_the_level_once(tmp_path):
    from zvf.distributed.export import object_parts

    rng = np.random.default_rng(9)
    lines = [np.clip(rng.uniform(0, 200, 3) + np.cumsum(rng.normal(0, 3, (20, 3)), 0), 0, 200).astype(np.float32)
             for _ in range(2000)]
    zvf.write_polylines(str(tmp_path / "l"), lines, chunk_shape=CHUNK)
    async with await zvf.aio.open(str(tmp_path / "l")) as ds:
        lvl = await ds.level(0)
        oids, table = await ds.context.manifests(lvl.index)
    chunks = lvl.nonempty_chunks

    def fetched(parts) -> int:  # chunks each partition's objects touch, summed over the partitions
        off = table.object_offsets
        total = 0
        for p in parts:
            rows = np.searchsorted(oids, p)
            refs = np.concatenate([np.arange(off[r], off[r + 1]) for r in rows])
            total += len(np.unique(table.coords[refs], axis=0))
        return total

    parts = object_parts(oids, table, chunks, 16, None)
    assert sorted(np.concatenate(parts).tolist()) == oids.tolist()
    assert max(map(len, object_parts(oids, table, chunks, 16, 10))) <= 10
    size = -(-len(oids) // len(parts))  # as many partitions, cut from the id order
    by_id = [oids[i:i + size] for i in range(0, len(oids), size)]
    assert 2 * fetched(parts) < fetched(by_id), (fetched(parts), fetched(by_id), len(chunks))


def test_errors_name_the_argument(tmp_path):
    with pytest.raises(InvalidArgumentError, match="memory://"):
        zd.write_points("memory://x", [np.zeros((1, 3))], chunk_shape=CHUNK)
    with pytest.raises(InvalidArgumentError, match="chunk_shape"):
        zd.write_points(str(tmp_path / "a"), [np.zeros((1, 3))], chunk_shape="auto")
    with pytest.raises(InvalidArgumentError, match="sources"):
        zd.write_points(str(tmp_path / "b"), 42, chunk_shape=CHUNK)
    with pytest.raises(InvalidArgumentError, match=r"sources\[1\]"):
        zd.write_points(str(tmp_path / "c"), [np.zeros((2, 3)), np.zeros((2, 2))], chunk_shape=CHUNK)
    with pytest.raises(InvalidArgumentError, match="table"):
        zd.to_dask(str(tmp_path / "c"), table="nodes")


def test_import_zvf_does_not_import_dask():
    import subprocess

    code = "import sys, zvf; zvf.open; assert 'dask' not in sys.modules and 'distributed' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cli_ingest_and_export_on_a_scheduler(client, tmp_path, capsys):
    from zvf.cli.main import main

    pos, ids, w = pieces(3, 300, seed=6)
    files = []
    for i in range(3):
        files.append(str(tmp_path / f"in{i}.npz"))
        np.savez(files[-1], positions=pos[i], object_ids=ids[i], attr_w=w[i])
    serial(tmp_path / "s" / "c", pos, ids, w)
    addr = client.scheduler.address
    target = str(tmp_path / "d" / "c")
    assert main(["ingest", target, *files, "--chunk-shape", "20,20,20", "--scheduler", addr, "-q"]) == 0
    assert tree(tmp_path / "s" / "c") == tree(target)
    assert main(["export", target, str(tmp_path / "out"), "--scheduler", addr, "-q"]) == 0
    assert "900 vertices" in capsys.readouterr().out
    assert _parts(tmp_path / "out").num_rows == 900
