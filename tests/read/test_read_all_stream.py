"""``read_all``'s whole-level path (read/points.py ``read_level``): rows placed chunk by chunk as
their cells land must equal the chunk-at-a-time reads (``iter_chunks(batch_chunks=1)``), whether
the cells are plain, sharded or compressed and a level whose vertex count lies is refused."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import zvf
import zvf.aio
from zvf.config import tuned
from zvf.errors import FormatError
from zvf.read.selection import Selection


def _lines(n: int = 240, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [np.clip(np.cumsum(rng.normal(0, 0.04, (int(rng.integers(2, 25)), 3)), axis=0)
                    + rng.uniform(0.2, 0.8, 3), 0, 1).astype(np.float32) for _ in range(n)]


async def _chunkwise(ds) -> Selection:
    parts = [sel async for sel in ds.iter_chunks(batch_chunks=1)]
    oids = None if parts[0].object_ids is None else np.concatenate([p.object_ids for p in parts])
    attrs = {k: np.concatenate([p.attributes[k] for p in parts]) for k in parts[0].attributes}
    return Selection(np.concatenate([p.positions for p in parts]), attrs, oids)


def _same(a: Selection, b: Selection) -> None:
    assert a.positions.dtype == b.positions.dtype and np.array_equal(a.positions, b.positions)
    if b.object_ids is None:
        assert a.object_ids is None
    else:
        assert a.object_ids is not None and a.object_ids.dtype == np.int64
        assert np.array_equal(a.object_ids, b.object_ids)
    assert sorted(a.attributes) == sorted(b.attributes)
    for k, v in b.attributes.items():
        assert a.attributes[k].dtype == v.dtype and np.array_equal(a.attributes[k], v)


@pytest.mark.parametrize("layout", [{}, {"shard_shape": 2}, {"compression": "zstd"}])
async def test_polylines_match_chunkwise(tmp_path, layout):
    path = str(tmp_path / "lines.zarrvectors")
    zvf.write_polylines(path, _lines(), chunk_shape=(0.25,) * 3, bounds=([0, 0, 0], [1, 1, 1]),
                        geometry_type="streamline", **layout)
    ds = await zvf.aio.open(path)
    sel = await ds.read_all()
    assert len(sel) == (await ds.level(0)).meta.vertex_count
    assert (sel.object_ids >= 0).all()
    _same(sel, await _chunkwise(ds))


@pytest.mark.parametrize("claimed", [0, 17, 10**4, 10**15])
async def test_a_wrong_vertex_count_is_refused(tmp_path, claimed):
    """Outputs are sized from the metadata (an absurd count allocates no more than prealloc_rows up front);
    cells holding another number of rows than the level's vertex_count make the read an error naming the level
    document, whether they hold more (refused as they arrive) or fewer -- never a short or padded answer."""
    with tuned(prealloc_rows=5000):
        rng = np.random.default_rng(1)
        pos = rng.uniform(0, 1, (900, 3)).astype(np.float32)
        attrs = {"rgb": rng.integers(0, 255, (900, 3)).astype(np.uint8), "w": rng.normal(size=900).astype(np.float32)}
        path = str(tmp_path / "pts.zarrvectors")
        zvf.write_points(path, pos, chunk_shape=(0.5,) * 3, attributes=attrs, object_ids=np.arange(900) // 7,
                         bounds=([0, 0, 0], [1, 1, 1]))
        ds = await zvf.aio.open(path)
        truth = await _chunkwise(ds)
        _same(await ds.read_all(), truth)
        lvl = await ds.level(0)
        lvl.meta = dataclasses.replace(lvl.meta, vertex_count=claimed)
        with pytest.raises(FormatError, match=rf"0/zarr\.json: vertex_count is {claimed}, but the .*cells"):
            await ds.read_all()


async def test_unlabelled_points_and_empty_level(tmp_path):
    pos = np.random.default_rng(2).uniform(0, 1, (500, 2)).astype(np.float64)
    path = str(tmp_path / "p2.zarrvectors")
    zvf.write_points(path, pos, chunk_shape=(0.3, 0.3))
    ds = await zvf.aio.open(path)
    sel = await ds.read_all()
    assert sel.object_ids is None
    _same(sel, await _chunkwise(ds))
    empty = str(tmp_path / "empty.zarrvectors")
    zvf.write_points(empty, np.zeros((0, 3), np.float32), chunk_shape=(1.0,) * 3, bounds=([0, 0, 0], [1, 1, 1]))
    sel = await (await zvf.aio.open(empty)).read_all()
    assert sel.positions.shape == (0, 3)


async def test_object_index_of_many_shards_labels_every_row(tmp_path):
    """An object index of several manifest shards is parsed shard by shard (``ObjectIndex.every_row``):
    the table equals the one-batch decode, and every row of ``read_all`` carries its own line's id."""
    lines = _lines(200, seed=4)
    path = str(tmp_path / "lines.zarrvectors")
    with tuned(manifest_shard_rows=32, manifest_inner_rows=16):
        zvf.write_polylines(path, lines, chunk_shape=(0.25,) * 3, bounds=([0, 0, 0], [1, 1, 1]),
                            geometry_type="streamline")
    ds = await zvf.aio.open(path)
    oindex = (await ds.level(0)).object_index
    assert oindex.count == 200 and oindex.rows_per_chunk == 32  # 7 shards
    _, table = await ds.manifests(0)
    whole = await oindex.table(np.arange(oindex.count))
    for name in ("object_row", "block", "coords", "fragment"):
        assert np.array_equal(getattr(table, name), getattr(whole, name))
    assert table.num_objects == whole.num_objects == 200
    sel = await ds.read_all()
    for k, line in enumerate(lines):
        got = sel.positions[sel.object_ids == k]
        assert np.array_equal(np.sort(got, axis=0), np.sort(line, axis=0))
