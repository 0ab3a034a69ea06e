"""Cells decoded in worker threads (a bulk read past ``thread_decode_bytes``): the same rows as on the event
loop, and a store whose cells inflate past its level's vertex_count is refused all the same."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import zstandard

import zvf
from zvf.config import tuned
from zvf.errors import FormatError, SizeLimitError


def _store(path, shard_shape=None):
    rng = np.random.default_rng(4)
    pos = rng.uniform(0, 100, (30_000, 3)).astype(np.float32)
    zvf.write_points(str(path), pos, attributes={"v": np.arange(len(pos), dtype=np.int32)}, chunk_shape=[25.0] * 3,
                     compression="zstd", shard_shape=shard_shape)
    return pos


@pytest.mark.parametrize("shard_shape", [None, "auto"])
def test_threads_decode_the_same_rows(tmp_path, shard_shape):
    pos = _store(tmp_path / "s", shard_shape)
    with tuned(thread_decode_bytes=1, decode_threads=3), zvf.open(str(tmp_path / "s")) as ds:
        every = ds.read_all()
        box = ds.query(([10.0, 20.0, 0.0], [80.0, 55.0, 100.0]))
    assert len(every) == len(pos)
    np.testing.assert_array_equal(every.positions, pos[every.attributes["v"]])
    inside = np.flatnonzero(np.all((pos >= [10, 20, 0]) & (pos <= [80, 55, 100]), axis=1))
    assert sorted(box.attributes["v"].tolist()) == inside.tolist()


def test_threads_refuse_cells_inflating_past_the_level(tmp_path):
    pos = _store(tmp_path / "s")
    cells = sorted(p for p in (tmp_path / "s/0/vertices/c").rglob("*") if p.is_file())
    assert len(cells) > 2
    rows = len(pos)  # one cell claiming as many rows as the whole level
    frame = struct.pack("<II", 1, rows * 12) + bytes(rows * 12)
    cells[0].write_bytes(zstandard.ZstdCompressor(level=3).compress(frame))
    with tuned(thread_decode_bytes=1), zvf.open(str(tmp_path / "s")) as ds, \
            pytest.raises((SizeLimitError, FormatError), match="vertex_count"):
        ds.read_all()
