"""The writer's cheaper paths give what the plain ones give: batched puts (local files, memory:
one worker-thread call stores many cells, same bytes, stats and errors as one put each),
manifest shards encoded in pieces, vertex cells gathered straight into their frames."""

from __future__ import annotations

import re

import numpy as np
import pytest

from zvf.config import tuned
from zvf.errors import InvalidArgumentError, ReadOnlyError
from zvf.io.executor import Executor
from zvf.io.store import open_store
from zvf.write.store_writer import StoreWriter


def _items(n: int, seed: int = 0) -> list[tuple[str, bytes]]:
    rng = np.random.default_rng(seed)
    return [(f"a/c/{i // 7}/{i % 7}", rng.integers(0, 256, int(rng.integers(0, 300)), np.uint8).tobytes())
            for i in range(n)]


@pytest.mark.parametrize("where", ["memory", "local"])
async def test_put_batch_stores_every_item_and_counts_them(where, tmp_path):
    ex = Executor(open_store("memory://" if where == "memory" else str(tmp_path / "s"), mode="w"))
    assert ex.batch_puts
    items = _items(50)
    ex.put_cached("meta", items[3][0], b"stale")
    await ex.put_batch(items)
    for key, data in items:
        assert await ex.get(key) == data
    assert ex.stats.puts == 50 and ex.stats.bytes_put == sum(len(d) for _, d in items)
    assert ex.get_cached("meta", items[3][0]) is None  # the batch invalidated what it overwrote


async def test_put_batch_stops_at_a_failure_and_reports_it_through_put():
    ex = Executor(open_store("memory://", mode="w"))
    items = [("ok/1", b"1"), ("bad/../2", b"2"), ("ok/3", b"3")]
    with pytest.raises(InvalidArgumentError, match=re.escape("bad/../2")):
        await ex.put_batch(items)
    assert await ex.get("ok/1") == b"1"
    assert await ex.get("ok/3") is None  # nothing after the failing item


async def test_put_batch_refused_on_a_read_only_store(tmp_path):
    (tmp_path / "s").mkdir()
    ex = Executor(open_store(str(tmp_path / "s"), mode="r"))
    assert not ex.batch_puts
    with pytest.raises(ReadOnlyError, match="k/1"):
        await ex.put_batch([("k/1", b"x"), ("k/2", b"y")])


async def test_store_writer_batches_give_the_bytes_of_single_puts(monkeypatch):
    """The same cells through batched and one-by-one uploads (a small budget forces waits)."""
    items = _items(300, seed=1)

    async def write(url: str) -> Executor:
        ex = Executor(open_store(url, mode="w"))
        async with StoreWriter(ex, overwrite=True, max_inflight_bytes=4096) as w:
            for key, data in items:
                await w.put_cell(key, data)
        return ex

    batched = await write("memory://")
    monkeypatch.setattr(Executor, "batch_puts", property(lambda self: False))
    single = await write("memory://")
    for ex in (batched, single):
        assert [await ex.get(k) for k, _ in items] == [d for _, d in items]
    assert batched.stats.puts == single.stats.puts


async def test_manifest_pieces_give_the_bytes_of_whole_shards():
    """Sharded manifests framed and compressed a piece of rows at a time equal one piece per shard."""
    from zvf.aio import write_polylines

    rng = np.random.default_rng(5)
    lines = [rng.uniform(0, 100, (int(rng.integers(1, 12)), 3)).astype(np.float32) for _ in range(700)]

    async def store(url: str) -> dict[str, bytes]:
        await write_polylines(url, lines, chunk_shape=(25.0,) * 3, compression="zstd")
        ex = Executor(open_store(url, mode="r"))
        return {k: await ex.get(k) for k, _ in await ex.list("0/object_index/manifests")}

    whole = await store("memory://pieces-whole")
    with tuned(piece_rows=48):  # 15 pieces of 3 inner chunks for one 704-row shard
        pieces = await store("memory://pieces-split")
    assert whole and whole == pieces


def test_vertex_frames_gathered_in_place_equal_encode_vlen():
    from zvf.format.vlen import encode_vlen, encode_vlen_rows
    from zvf.write.level import row_view

    rng = np.random.default_rng(2)
    for dtype, shape in ((np.float32, (500, 3)), (np.float64, (40, 2)), (np.uint8, (9, 1)), (np.float32, (0, 3))):
        col = row_view(rng.uniform(0, 9, shape).astype(dtype))
        for take in (rng.integers(0, max(len(col), 1), 77) if len(col) else np.zeros(0, np.int64), np.arange(len(col))):
            frame = encode_vlen_rows(col, take.astype(np.int32))
            assert frame.tobytes() == encode_vlen([np.take(col, take, axis=0).view(np.uint8)])


async def test_numpy_cells_above_the_multipart_threshold_upload_whole():
    ex = Executor(open_store("memory://", mode="w", storage_options={"multipart_threshold": 64}))
    cell = np.arange(1000, dtype=np.uint32).view(np.uint8)
    await ex.put("big", cell)  # a framed-in-place cell: one blob, not an iterable of scalars
    await ex.put_batch([("a", cell), ("b", cell[:10])])  # too big to batch: each goes through put
    for key, want in (("big", cell), ("a", cell), ("b", cell[:10])):
        assert await ex.get(key) == want.tobytes()
    assert ex.stats.bytes_put == 2 * cell.nbytes + 10
