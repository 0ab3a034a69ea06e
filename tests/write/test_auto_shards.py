"""shard_shape="auto" (the default of an auto layout): the whole grid in one shard while it is small, blocks
within the byte and cell budgets past that; a whole-level read is one GET per array, a box reads the same rows
as unsharded, and 0.9.2 / plain zarr read the store."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

import zvf
import zvf.aio as za
from zvf.config import tuned, tuning
from zvf.errors import InvalidArgumentError
from zvf.write.jobs import new_job
from zvf.write.level import auto_shard_shape


def test_the_whole_grid_while_the_level_is_small():
    assert auto_shard_shape((5, 5, 1), 10 << 20) == (5, 5, 1)
    assert auto_shard_shape((1, 1, 1), 10 << 20) is None  # one cell: nothing to gain


def test_blocks_past_the_byte_budget_stay_within_it():
    grid = (40, 40, 4)
    level_bytes = 8 * tuning().shard_auto_bytes
    block = auto_shard_shape(grid, level_bytes)
    assert block is not None
    shards = math.prod(math.ceil(g / b) for g, b in zip(grid, block))
    assert shards >= 8
    assert math.prod(block) <= math.prod(grid) // 8


def test_never_more_cells_than_the_index_budget():
    with tuned(shard_auto_cells=64):
        block = auto_shard_shape((100, 100, 100), 1)
    assert block is not None and math.prod(block) <= 64 and all(b >= 1 for b in block)


def _points(n=40_000, seed=3):
    rng = np.random.default_rng(seed)
    pos = rng.uniform(0, 1000, (n, 3)).astype(np.float32)
    return pos, {"intensity": rng.uniform(0, 1, n).astype(np.float32), "class": rng.integers(0, 9, n).astype(np.uint8)}


@pytest.mark.asyncio
async def test_auto_layout_reads_a_level_in_one_get_per_array(memory_url):
    pos, attrs = _points()
    await za.write_points(memory_url, pos, attributes=attrs, chunk_shape=[250.0] * 3, shard_shape="auto",
                          compression="zstd")
    plain = memory_url + "-plain"
    await za.write_points(plain, pos, attributes=attrs, chunk_shape=[250.0] * 3, compression="zstd")
    async with await za.open(memory_url) as ds, await za.open(plain) as ref:
        before = ds.stats.requests
        every = await ds.read_all()
        assert ds.stats.requests - before <= 3  # vertices, intensity, class: one shard each
        box = ((100.0, 200.0, 0.0), (420.0, 640.0, 333.0))
        got, want = await ds.query(box), await ref.query(box)
        assert len(every.positions) == len(pos)
    order = np.lexsort(got.positions.T)
    worder = np.lexsort(want.positions.T)
    np.testing.assert_array_equal(got.positions[order], want.positions[worder])
    for name in attrs:
        np.testing.assert_array_equal(got.attributes[name][order], want.attributes[name][worder])


def test_auto_chunks_shard_by_default_and_none_opts_out(tmp_path):
    pos, _ = _points(300_000)  # several chunks of the auto layout
    zvf.write_points(str(tmp_path / "a"), pos, chunk_shape="auto")
    zvf.write_points(str(tmp_path / "b"), pos, chunk_shape="auto", shard_shape=None)
    zvf.write_points(str(tmp_path / "c"), pos, chunk_shape=[250.0] * 3)
    names = [c["name"] for c in json.loads((tmp_path / "a/0/vertices/zarr.json").read_text())["codecs"]]
    assert names == ["sharding_indexed"]
    for plain in ("b", "c"):
        codecs = json.loads((tmp_path / plain / "0/vertices/zarr.json").read_text())["codecs"]
        assert all(c["name"] != "sharding_indexed" for c in codecs)


def test_reference_and_zarr_read_an_auto_sharded_store(tmp_path):
    zarr = pytest.importorskip("zarr")
    ref = pytest.importorskip("zarr_vectors.types.points")
    pos, _ = _points(30_000, seed=5)
    path = tmp_path / "s.zarrvectors"
    zvf.write_points(str(path), pos, chunk_shape=[250.0] * 3, shard_shape="auto", compression="zstd")
    meta = json.loads((path / "0/vertices/zarr.json").read_text())
    assert meta["codecs"][0]["name"] == "sharding_indexed"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = ref.read_points(str(path))["positions"]
    assert len(got) == len(pos)
    np.testing.assert_array_equal(got[np.lexsort(got.T)], pos[np.lexsort(pos.T)])
    arr = zarr.open_group(str(path), mode="r")["0/vertices"]
    assert arr.shape == tuple(meta["shape"])


def test_distributed_writes_refuse_auto_shards():
    with pytest.raises(InvalidArgumentError, match="shard_shape"):
        new_job("memory://x", None, job=None, chunk_shape=[1.0, 1.0], bin_shape=None, bounds=None, dtype=None,
                compression=None, shard_shape="auto")
