"""Checked by mypy (tests/typing/test_types.py), never run: what a type checker sees of zvf's public API.

``assert_type`` fails the mypy run when a name's type drifts (to ``Any``
above all); every ``# E`` line must be rejected and no other; each
``# R:`` line's revealed type must contain the text after the marker.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import assert_type, reveal_type

import numpy as np
import numpy.typing as npt
from obstore.store import MemoryStore

import zvf
import zvf.aio
from zvf.aio import AsyncDataset
from zvf.errors import DatasetClosedError

pos = np.zeros((4, 3), dtype=np.float32)
opts: zvf.StorageOptions = {"endpoint": "http://127.0.0.1:9000", "concurrency": 8, "timeout": "5s"}


def blocking() -> None:
    assert_type(zvf.open("s.zarrvectors"), zvf.Dataset)
    assert_type(zvf.open(MemoryStore(), storage_options={"concurrency": 2}), zvf.Dataset)
    summary = zvf.write_points("s3://b/s", pos, chunk_shape=(10.0, 10.0, 10.0), storage_options=opts)
    assert_type(summary, zvf.WriteSummary)
    assert_type(summary.vertex_count, int)
    assert_type(summary.link_count, int | None)
    assert_type(zvf.write_polylines("p", [pos], chunk_shape=(5.0, 5.0, 5.0)), zvf.WriteSummary)
    assert_type(zvf.write_lines("l", np.zeros((2, 2, 3)), chunk_shape=(5, 5, 5)), zvf.WriteSummary)
    assert_type(zvf.write_graph("g", pos, [[0, 1]], chunk_shape=(5, 5, 5), geometry_type="skeleton"), zvf.WriteSummary)
    assert_type(zvf.write_mesh("m", pos, [[0, 1, 2]], chunk_shape=(5, 5, 5)), zvf.WriteSummary)
    with zvf.open("s") as ds:
        assert_type(ds, zvf.Dataset)
        assert_type(ds.query(([0, 0, 0], [1, 1, 1])), zvf.Selection)
        assert_type(ds.query(([0, 0, 0], [1, 1, 1]), level=1, attributes=["v"], clip=True), zvf.Selection)
        assert_type(ds.read_objects([1, 2]), list[zvf.Selection])
        assert_type(ds.read_objects([1, 2], combined=True), zvf.Selection)
        assert_type(ds.read_object(3), zvf.Selection)
        assert_type(ds.read_all(), zvf.Selection)
        assert_type(ds.object_ids(), npt.NDArray[np.int64])
        assert_type(ds.iter_chunks(prefetch=2), Iterator[zvf.Selection])
        assert_type(ds.iter_objects([1]), Iterator[zvf.Selection])
        assert_type(ds.levels, list[int])
        assert_type(ds.aio, AsyncDataset)
        query = ds.select(bbox=([0, 0, 0], [1, 1, 1])).select(objects=[1, 2], where={"v": (0, 5)})
        assert_type(query, zvf.Query)
        assert_type(query.read(), zvf.Selection)
        assert_type(query.count(), int)
        assert_type(query.object_ids(), npt.NDArray[np.int64])
        assert_type(query.iter(batch=4), Iterator[zvf.Selection])
        ds.append_points(pos, attributes={"v": [1, 2, 3, 4]}, cast=True)
        assert_type(ds.close(), None)
    assert_type(zvf.write_points("s", pos, chunk_shape=(5, 5, 5), fragment_attributes={"w": {(0, 0, 0): [1.0]}}),
                zvf.WriteSummary)
    reveal_type(zvf.open)  # R: mode: str =, storage_options: TypedDict(zvf.io.options.StorageOptions
    reveal_type(zvf.Dataset.query)  # R: *, level: int =, attributes: str | typing.Sequence[str] | None =
    reveal_type(zvf.write_points)  # R: chunk_shape: typing.Sequence[float] | Literal['auto'], attributes:
    reveal_type(zvf.write_mesh)  # R: shard_shape: int | typing.Sequence[int] | Literal['auto'] | None =
    reveal_type(zvf.aio.write_graph)  # R: **options: **TypedDict(zvf.write.types.ObjectWriteOptions, {'bin_shape'?:
    wopts: zvf.WriteOptions = {"compression": "zstd", "dtype": "float64", "overwrite": True}
    assert_type(zvf.write_lines("l", np.zeros((2, 2, 3)), chunk_shape=(5, 5, 5), **wopts), zvf.WriteSummary)
    assert_type(zvf.write_polylines("p", [pos], chunk_shape=(5, 5, 5), bin_shape=(1, 1, 1), bounds=([0] * 3, [9] * 3),
                                    groups={0: [0]}, shard_shape=2, object_index_layout="reference",
                                    fragment_attributes=None, storage_options=opts), zvf.WriteSummary)
    assert_type(zvf.validate("s", level=2).ok, bool)
    assert issubclass(DatasetClosedError, zvf.errors.ZvfError)
    with zvf.timeout(2.5), zvf.open("s") as timed:
        assert_type(timed.query(([0, 0, 0], [1, 1, 1])), zvf.Selection)
    assert issubclass(zvf.errors.CallTimeoutError, TimeoutError)
    converted = zvf.convert("cloud.laz", "s3://b/cloud", chunk_shape=(20.0, 20.0, 20.0), batch_rows=100_000)
    assert_type(converted, zvf.ConvertSummary)
    assert_type(converted["vertices"], int)
    assert_type(converted["seconds"], float)
    assert_type(converted["from"], str)
    copts: zvf.ConvertOptions = {"level": 1, "ascii": True}
    assert_type(zvf.convert("s3://b/mesh", "mesh.stl", **copts), zvf.ConvertSummary)
    reveal_type(zvf.convert)  # R: level: int =, batch_rows: int =, batch: int =


async def asynchronous() -> None:
    async with await zvf.aio.open("s", storage_options=opts) as ads:
        assert_type(ads, AsyncDataset)
        assert_type(await ads.query(([0, 0, 0], [1, 1, 1])), zvf.Selection)
        assert_type(await ads.read_objects([1]), list[zvf.Selection])
        assert_type(await ads.read_objects([1], combined=True), zvf.Selection)
        async for sel in ads.iter_chunks():
            assert_type(sel, zvf.Selection)
        aquery = ads.select(near=([0, 0, 0], 2.0)).select(level="auto", max_vertices=100)
        assert_type(aquery, zvf.aio.AsyncQuery)
        assert_type(await aquery.read(), zvf.Selection)
        assert_type(await aquery.count(), int)
        async for sel in aquery.iter():
            assert_type(sel, zvf.Selection)
    reveal_type(AsyncDataset.select)  # R: **narrowing: **TypedDict(zvf.read.query.spec.SelectArgs
    assert_type(await zvf.aio.write_points("s", pos, chunk_shape=(10.0, 10.0, 10.0)), zvf.WriteSummary)
    assert_type(await zvf.aio.write_polylines("p", [pos], chunk_shape=(5, 5, 5)), zvf.WriteSummary)
    assert_type(await zvf.aio.write_lines("l", np.zeros((2, 2, 3)), chunk_shape=(5, 5, 5)), zvf.WriteSummary)
    assert_type(await zvf.aio.write_graph("g", pos, [[0, 1]], chunk_shape=(5, 5, 5)), zvf.WriteSummary)
    assert_type(await zvf.aio.write_mesh("m", pos, [[0, 1, 2]], chunk_shape=(5, 5, 5)), zvf.WriteSummary)
    await zvf.aio.write_polylines("p", [pos], chunk_shape=(5, 5, 5), overwirte=True)  # E: misspelled writer keyword
    reveal_type(zvf.aio.open)  # R: -> typing.Coroutine[Any, Any, zvf.api.dataset.AsyncDataset]
    assert_type(await zvf.aio.convert(["a.swc", "b.swc"], "s", bin_shape=None, progress=print), zvf.ConvertSummary)


def rejected(ds: zvf.Dataset) -> None:
    ds.query(([0, 0, 0], [1, 1, 1]), levle=1)  # E: unexpected keyword
    zvf.write_points("s", pos)  # E: chunk_shape is required
    zvf.write_points("s", pos, chunk_shape=5.0)  # E: one edge per axis
    zvf.open("s", storage_options={"concurency": 3})  # E: unknown storage option
    zvf.open("s", mode=1)  # E: mode is a str
    zvf.timeout("5s")  # E: seconds are a number
    zvf.write_mesh("m", pos, [[0, 1, 2]], chunk_shape=(5, 5, 5), dtyp="float32")  # E: misspelled writer keyword
    zvf.write_graph("g", pos, [[0, 1]], chunk_shape=(5, 5, 5), overwrite="yes")  # E: overwrite is a bool
    ds.append_points(pos, cast="yes")  # E: cast is a bool
    ds.select(bbx=([0, 0, 0], [1, 1, 1]))  # E: unknown select keyword
    ds.select().select(level="coarse")  # E: a level number or "auto"
    ds.select(limit="5").count()  # E: limit is an int
    bad: zvf.WriteOptions = {"compresion": "zstd"}  # E: unknown writer option
    zvf.write_points("s", pos, chunk_shape=(5, 5, 5), **bad)
    zvf.convert("a.csv", "s", batch_row=10)  # E: misspelled format option
    zvf.convert("a.csv", "s", chunk_shape=5.0)  # E: one edge per axis
    zvf.convert("s", "a.csv", level="0")  # E: level is an int
    zvf.convert("a.csv", "s")["vertexes"]  # E: no such summary key
