"""Streaming ingest: write_points over batches writes the in-memory writer's bytes in bounded memory."""

from __future__ import annotations

import os
import tracemalloc

import boto3
import numpy as np
import pytest

import zvf
from tests.support.store_tree import assert_same_files, store_files
from zvf.errors import InvalidArgumentError, StoreExistsError
from zvf.write.points.stream import is_batch_stream, write_points_stream


def cloud(n: int, seed: int = 1, ids: bool = False):
    rng = np.random.default_rng(seed)
    pos = rng.uniform(-10, 90, (n, 3)).astype(np.float32)
    attrs = {"w": rng.random(n).astype(np.float32), "rgb": rng.integers(0, 255, (n, 3)).astype(np.uint8)}
    oids = rng.integers(0, 300, n) if ids else None
    return pos, attrs, oids


def uneven(n: int, k: int, seed: int = 2) -> list[np.ndarray]:
    cuts = np.sort(np.random.default_rng(seed).choice(np.arange(1, n), k - 1, replace=False))
    return np.split(np.arange(n), cuts)


def batches_of(pos, attrs, oids, parts):
    for idx in parts:
        batch = {"positions": pos[idx], "attributes": {k: v[idx] for k, v in attrs.items()}}
        if oids is not None:
            batch["object_ids"] = oids[idx]
        yield batch


def test_seven_uneven_batches_write_the_same_bytes(tmp_path):
    pos, attrs, _ = cloud(200_000)
    kw = dict(chunk_shape=(25, 25, 25), bin_shape=(12.5, 12.5, 12.5), compression="zstd")
    mem = zvf.write_points(tmp_path / "a" / "s", pos, attributes=attrs, **kw)
    streamed = zvf.write_points(tmp_path / "b" / "s", batches_of(pos, attrs, None, uneven(len(pos), 7)), **kw)
    assert_same_files(tmp_path / "a" / "s", tmp_path / "b" / "s")  # bounds computed from the data
    same = ("vertex_count", "chunk_count", "object_count", "bins_per_chunk", "cells_written", "bytes_written")
    assert [getattr(mem, k) for k in same] == [getattr(streamed, k) for k in same]


async def test_object_ids_shards_many_runs_async_source(tmp_path):
    """Object index from per-chunk fragments; shards flushed early; several spill runs."""
    pos, attrs, oids = cloud(30_000, seed=3, ids=True)
    kw = dict(chunk_shape=(20, 20, 20), shard_shape=(2, 1, 3), bounds=([-10] * 3, [90] * 3),
              object_attributes={"score": np.arange(300.0)}, groups={0: [1, 2], 2: [5]})
    await zvf.aio.write_points(tmp_path / "a" / "s", pos, attributes=attrs, object_ids=oids, **kw)

    async def source():
        for batch in batches_of(pos, attrs, oids, uneven(len(pos), 9)):
            yield batch
            yield {"positions": batch["positions"][:0], "object_ids": batch["object_ids"][:0],
                   "attributes": {k: v[:0] for k, v in batch["attributes"].items()}}

    await write_points_stream(tmp_path / "b" / "s", source(), spill_bytes=64 << 10, **kw)
    assert_same_files(tmp_path / "a" / "s", tmp_path / "b" / "s")


def test_bare_arrays_and_groups_without_ids(tmp_path):
    pos, _, _ = cloud(3000, seed=4)
    kw = dict(chunk_shape=(30, 30, 30), groups={0: [1, 2], 2: [7]}, group_attributes={"g": np.arange(3.0)},
              object_index_layout="reference")
    zvf.write_points(tmp_path / "a" / "s", pos, **kw)
    zvf.write_points(tmp_path / "b" / "s", [pos[:1000], pos[1000:1001], pos[1001:]], **kw)
    assert_same_files(tmp_path / "a" / "s", tmp_path / "b" / "s")


def test_is_batch_stream():
    pos = np.zeros((4, 3), np.float32)
    assert not is_batch_stream(pos) and not is_batch_stream(pos.tolist())
    assert is_batch_stream([pos, pos]) and is_batch_stream([{"positions": pos}]) and is_batch_stream(iter([pos]))


async def test_memory_stays_bounded(tmp_path):
    """tracemalloc peak stays a fraction of the data (the in-memory writer needs several times it)."""
    n, b = 600_000, 10_000

    def source():
        rng = np.random.default_rng(0)
        for _ in range(n // b):
            yield {"positions": rng.uniform(0, 100, (b, 3)).astype(np.float32),
                   "attributes": {"w": rng.random(b, dtype=np.float32)}}

    tracemalloc.start()
    try:
        summary = await write_points_stream(
            tmp_path / "s", source(), chunk_shape=(25, 25, 25), bounds=([0] * 3, [100] * 3),
            spill_bytes=512 << 10, upload_bytes=512 << 10)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    data = n * 16
    assert summary.vertex_count == n
    assert peak < data / 3, f"peak {peak / 1e6:.1f} MB for {data / 1e6:.1f} MB of rows"


def test_bad_batches_name_the_batch(tmp_path):
    pos = np.random.default_rng(0).uniform(0, 10, (100, 2)).astype(np.float32)
    kw = dict(chunk_shape=(5, 5))
    with pytest.raises(InvalidArgumentError, match=r"batches\[1\].*attributes"):
        zvf.write_points(tmp_path / "a", [{"positions": pos, "attributes": {"w": pos[:, 0]}},
                                          {"positions": pos, "attributes": {"w": pos[:, 0].astype(np.float64)}}], **kw)
    with pytest.raises(InvalidArgumentError, match=r"batches\[1\].*object_ids"):
        zvf.write_points(tmp_path / "b", [{"positions": pos, "object_ids": np.arange(100)}, {"positions": pos}], **kw)
    with pytest.raises(InvalidArgumentError, match=r"batches\[2\].*outside bounds"):
        zvf.write_points(tmp_path / "c", [pos, pos, pos + 20], bounds=([0, 0], [10, 10]), **kw)
    with pytest.raises(InvalidArgumentError, match=r"batches\[0\].*3-D"):
        zvf.write_points(tmp_path / "d", [np.zeros((3, 3))], **kw)
    with pytest.raises(InvalidArgumentError, match="inside each batch"):
        zvf.write_points(tmp_path / "e", [pos], attributes={"w": pos[:, 0]}, **kw)
    with pytest.raises(InvalidArgumentError, match="bounds are required"):
        zvf.write_points(tmp_path / "f", iter([]), **kw)


async def test_failed_source_leaves_no_store_and_no_spill(tmp_path):
    spill = tmp_path / "spill"
    spill.mkdir()

    def source():
        yield np.ones((10, 2), np.float32)
        raise RuntimeError("source broke")

    with pytest.raises(RuntimeError, match="source broke"):
        await write_points_stream(tmp_path / "s", source(), chunk_shape=(5, 5), spill_dir=spill)
    assert not (tmp_path / "s" / "zarr.json").exists() and os.listdir(spill) == []


def test_existing_store_fails_before_reading_batches(tmp_path):
    zvf.write_points(tmp_path / "s", np.ones((5, 2)), chunk_shape=(5, 5))
    pulled = []

    def source():
        pulled.append(1)
        yield np.ones((5, 2))

    with pytest.raises(StoreExistsError):
        zvf.write_points(tmp_path / "s", source(), chunk_shape=(5, 5))
    assert pulled == []


@pytest.mark.s3
def test_large_cells_go_multipart_on_s3(s3_proxied, tmp_path):
    """A 6 MB vertex cell above a 1 MiB threshold is uploaded in 5 MiB parts; bytes as written locally."""
    url, opts, proxy = s3_proxied
    pos = np.random.default_rng(5).uniform(0, 9, (500_000, 3)).astype(np.float32)  # one chunk: 6 MB of vertices
    kw = dict(chunk_shape=(10, 10, 10), bounds=([0] * 3, [10] * 3))
    zvf.write_points(tmp_path / "data", pos, **kw)
    proxy.reset_counters()
    zvf.write_points(url, [pos[:123_457], pos[123_457:]], **kw,
                     storage_options={**opts, "multipart_threshold": 1 << 20, "part_size": 5 << 20})
    posts = [p for _, m, p, _, _ in proxy.log if m == "POST" and p.endswith("0/vertices/c/0/0/0")]
    parts = [p for _, m, p, _, _ in proxy.log if m == "PUT" and p.endswith("0/vertices/c/0/0/0")]
    assert len(posts) == 2 and len(parts) == 2  # create + complete; 5 MiB + rest
    bucket, prefix = url[len("s3://"):].split("/", 1)
    s3 = boto3.client("s3", endpoint_url=opts["endpoint"], aws_access_key_id=opts["access_key_id"],
                      aws_secret_access_key=opts["secret_access_key"], region_name=opts["region"])
    local = store_files(tmp_path / "data")
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix + "/")["Contents"]
    assert sorted(o["Key"][len(prefix) + 1:] for o in listed) == sorted(local)
    for key, blob in local.items():
        assert s3.get_object(Bucket=bucket, Key=f"{prefix}/{key}")["Body"].read() == blob, key
